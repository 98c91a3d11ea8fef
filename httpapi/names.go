package httpapi

import (
	"net/http"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkName answers 400 unless v, the value of field, is a name that reads
// as what it is: no control characters (ESC would let "ad\x1bmin" display
// as "admin"), no invisible format characters (zero-width spaces and
// joiners, bidirectional overrides and isolates, the byte-order mark), no
// line or paragraph separators, no U+FFFD (what an invalid escape decodes
// to) and no spaces at either end.
func checkName(field, v string) error {
	if strings.TrimSpace(v) != v {
		return errorf(http.StatusBadRequest, "Invalid request: %s: %q starts or ends with a space; remove it", field, v)
	}
	for _, r := range v {
		if bad := badNameRune(r); bad != "" {
			return errorf(http.StatusBadRequest, "Invalid request: %s: %q contains %s (%U), which displays as something else or not at all; use visible characters only", field, v, bad, r)
		}
	}
	return nil
}

// badNameRune says what kind of character r is when a name may not hold
// it, else "".
func badNameRune(r rune) string {
	switch {
	case unicode.IsControl(r):
		return "a control character"
	case unicode.Is(unicode.Cf, r):
		return "an invisible formatting character"
	case unicode.In(r, unicode.Zl, unicode.Zp):
		return "a line separator"
	case r == utf8.RuneError:
		return "a replacement character"
	}
	return ""
}

// checkNames runs checkName on each field that is set, in the order of the
// field names.
func checkNames(fields map[string]*string) error {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if v := fields[name]; v != nil {
			if err := checkName(name, *v); err != nil {
				return err
			}
		}
	}
	return nil
}
