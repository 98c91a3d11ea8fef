package colsync

import (
	"regexp"
	"strconv"
	"strings"
)

// Compatible reports whether a destination column of type dst can take every
// value of a source column of type src without loss, through text COPY and
// text values. Both are Column.Type strings. Identical types are compatible;
// beyond that only widenings are: a longer or unlimited varchar, text for any
// character type, a wider integer, double precision for real, numeric with
// room for the source's digits, a timestamp or time with more or unlimited
// fractional digits, and jsonb for json.
func Compatible(src, dst string) bool {
	if src == dst {
		return true
	}
	s, d := parseType(src), parseType(dst)
	switch {
	case charTypes[s.name] && (d.name == "text" || d.name == "character varying"):
		if d.name == "text" || d.mods == nil {
			return true
		}
		return s.name != "text" && s.mods != nil && s.mods[0] <= d.mods[0]
	case intRank[s.name] > 0 && intRank[d.name] > 0:
		return intRank[d.name] >= intRank[s.name]
	case intRank[s.name] > 0 && d.name == "numeric":
		return d.mods == nil || d.mods[0]-scale(d) >= intDigits[s.name]
	case s.name == "real" && d.name == "double precision":
		return true
	case s.name == "numeric" && d.name == "numeric":
		if d.mods == nil {
			return true
		}
		return s.mods != nil && scale(d) >= scale(s) && d.mods[0]-scale(d) >= s.mods[0]-scale(s)
	case s.name == d.name && timeTypes[s.name]:
		return d.mods == nil || (s.mods != nil && d.mods[0] >= s.mods[0])
	case s.name == "json" && d.name == "jsonb":
		return true
	}
	return false
}

var (
	charTypes = map[string]bool{"text": true, "character varying": true, "character": true}
	intRank   = map[string]int{"smallint": 1, "integer": 2, "bigint": 3}
	intDigits = map[string]int{"smallint": 5, "integer": 10, "bigint": 19}
	timeTypes = map[string]bool{
		"timestamp without time zone": true, "timestamp with time zone": true,
		"time without time zone": true, "time with time zone": true,
	}
	// typeRE splits format_type output into a name and its modifiers, also
	// for the time types whose modifier sits in the middle:
	// "timestamp(3) with time zone".
	typeRE = regexp.MustCompile(`^([a-z ]+?)(?:\((\d+)(?:,(\d+))?\))?((?: with| without) time zone)?$`)
)

type parsedType struct {
	name string
	mods []int // nil without modifiers
}

func parseType(s string) parsedType {
	m := typeRE.FindStringSubmatch(s)
	if m == nil {
		return parsedType{name: s}
	}
	p := parsedType{name: strings.TrimSpace(m[1] + m[4])}
	for _, v := range m[2:4] {
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return parsedType{name: s}
		}
		p.mods = append(p.mods, n)
	}
	return p
}

// scale returns the scale of a numeric type (0 when not given).
func scale(p parsedType) int {
	if len(p.mods) < 2 {
		return 0
	}
	return p.mods[1]
}

// Built-in type OIDs whose type changes noRewrite knows.
const (
	oidText    = 25
	oidVarchar = 1043
	oidNumeric = 1700
	oidVarbit  = 1562
)

// NoRewrite reports a type change that PostgreSQL makes without rewriting
// the table (binary-coercible, values unchanged): a longer varchar or
// bit varying, varchar to text or unbounded, a numeric with more precision
// and the same scale or unbounded.
func NoRewrite(oldOID uint32, oldMod int32, newOID uint32, newMod int32) bool {
	switch {
	case oldOID == oidVarchar && newOID == oidText:
		return true
	case oldOID == oidText && newOID == oidVarchar && newMod == -1:
		return true
	case oldOID != newOID:
		return false
	case newMod == -1:
		return oldOID == oidVarchar || oldOID == oidVarbit || oldOID == oidNumeric
	case oldMod == -1:
		return false
	case oldOID == oidVarchar || oldOID == oidVarbit:
		return newMod >= oldMod
	case oldOID == oidNumeric:
		// typmod - 4 = precision << 16 | scale
		return (newMod-4)&0xffff == (oldMod-4)&0xffff && (newMod-4)>>16 >= (oldMod-4)>>16
	}
	return false
}
