package main

// Terminal safety of the client's output. Names, messages, keys and log
// entries come from the service, and through it from whoever could create a
// table, a mirror or a log line: printed raw, an escape sequence in them
// would repaint the terminal, move the cursor, set the window title, or
// reorder a line (bidirectional overrides). escapeControls owns the rule;
// every human-readable print goes through printf (which escapes each
// argument) and through the terminal writers of runCLI (which escape what
// is left of a whole line but keep its newlines and tabs).

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgmirror/pgmirror/db"
)

// isUnsafeRune tells whether r must not reach a terminal as it is: the C0
// controls and DEL, the C1 controls U+0080-U+009F (CSI, OSC, ... on some
// terminals), the bidirectional embeddings, overrides, isolates and marks
// (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C), and the Unicode
// line and paragraph separators.
func isUnsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200e, r == 0x200f, r == 0x061c, r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// escapeControls returns s with every character a terminal would act on
// written out as an escape: \n, \t and \r by name, other C0 controls, DEL
// and bytes that are not UTF-8 as \xNN, C1 controls and the bidirectional
// and line-separator characters as \uNNNN. With keepLayout, newlines and
// tabs stay (for whole lines of output the client formatted itself); cells
// and values are escaped without it, so that a name cannot start a new row
// or shift a column. Backslashes are not doubled: the output is for people,
// and --json gives the exact values.
func escapeControls(s string, keepLayout bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || (isUnsafeRune(r) && !(keepLayout && (r == '\n' || r == '\t'))) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLayout && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case isUnsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// printf is fmt.Fprintf for human-readable output: the format is the
// client's own, every argument that carries text (strings, byte slices,
// errors, Stringers, and pointers to strings) is escaped with
// escapeControls before it is formatted. Numbers and booleans pass as they
// are.
func printf(w io.Writer, format string, args ...any) {
	for i, a := range args {
		args[i] = safeArg(a)
	}
	_, _ = fmt.Fprintf(w, format, args...)
}

// safeArg is one argument of printf, escaped when it carries text.
func safeArg(a any) any {
	switch v := a.(type) {
	case string:
		return escapeControls(v, false)
	case *string:
		if v == nil {
			return a
		}
		return escapeControls(*v, false)
	case []byte:
		return escapeControls(string(v), false)
	case error:
		return escapeControls(v.Error(), false)
	case fmt.Stringer:
		return escapeControls(v.String(), false)
	}
	return a
}

// terminalWriter escapes whatever reaches it but newlines and tabs: the
// last line of defence between the service's text and the user's terminal,
// for output that printf already escaped and for the client's own words.
// Every Write is escaped on its own; the client writes whole strings, so a
// character is never split between two writes.
type terminalWriter struct{ w io.Writer }

func (t terminalWriter) Write(p []byte) (int, error) {
	safe := escapeControls(string(p), true)
	if len(safe) == len(p) {
		return t.w.Write(p)
	}
	if _, err := io.WriteString(t.w, safe); err != nil {
		return 0, err
	}
	return len(p), nil
}

// jsonTerminalSafe rewrites the characters of valid JSON that a terminal
// would act on (DEL, C1 controls, bidirectional and line-separator
// characters, all of which JSON allows raw inside strings) as \uNNNN
// escapes: the same JSON value, so scripts get exactly the API's data, and
// nothing that repaints a terminal when a person reads it. The C0 controls
// cannot occur raw in valid JSON; a byte that is not UTF-8 (which
// encoding/json reads as U+FFFD) becomes \ufffd.
func jsonTerminalSafe(raw []byte) []byte {
	if utf8.Valid(raw) && bytes.IndexFunc(raw, func(r rune) bool { return r >= 0x7f && isUnsafeRune(r) }) < 0 {
		return raw
	}
	var b bytes.Buffer
	b.Grow(len(raw) + 16)
	for i := 0; i < len(raw); {
		r, n := utf8.DecodeRune(raw[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\ufffd`)
		case r >= 0x7f && isUnsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.Write(raw[i : i+n])
		}
		i += n
	}
	return b.Bytes()
}

// Units and times for people. The console (httpapi/ui/static/app.js:
// fmtSeconds, fmtBytes, fmtTime) writes them by the same rules, so that
// an operator reads the same "3 h 2 min" or "1.6 KiB" in both:
//   - durations: "0.25 s" under 10 s, "45 s" under a minute, then two
//     units, the second dropped when it is 0: "3 min 12 s", "3 h 2 min",
//     "2 d 5 h";
//   - sizes in IEC units (1 KiB = 1024 bytes): "1023 B", "1.6 KiB", "5.0 MiB";
//   - times in the local zone with the zone's offset from UTC:
//     "2026-11-27 19:52:04 UTC+01:00", "… UTC" when the offset is 0;
//   - counts with their noun in the right number: "1 table", "2 tables".

// formatTime is a time in the local zone with its offset, "-" for none.
func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return formatTimeLayout(*t, "2006-01-02 15:04:05")
}

// formatTimeLayout formats t in the local zone by layout, followed by the
// zone: "UTC" or "UTC+hh:mm" / "UTC-hh:mm".
func formatTimeLayout(t time.Time, layout string) string {
	return formatTimeIn(t, time.Local, layout)
}

// formatTimeIn is formatTimeLayout in the zone loc.
func formatTimeIn(t time.Time, loc *time.Location, layout string) string {
	t = t.In(loc)
	return t.Format(layout) + " " + zoneName(t)
}

// zoneName is "UTC" for an offset of 0, else "UTC+01:00", "UTC-05:00",
// "UTC+05:30".
func zoneName(t time.Time) string {
	_, off := t.Zone()
	if off == 0 {
		return "UTC"
	}
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("UTC%c%02d:%02d", sign, off/3600, off%3600/60)
}

func formatLag(s *float64) string {
	if s == nil {
		return "-"
	}
	return formatSeconds(*s)
}

// formatSeconds is a duration for people: "0.25 s", "45 s", "3 min 12 s",
// "3 h 2 min", "2 d 5 h".
func formatSeconds(sec float64) string {
	if sec < 0 || math.IsNaN(sec) {
		sec = 0
	}
	// Rounded first to what is shown, so that 9.996 s is "10 s", not "10.00 s".
	if r := math.Round(sec*100) / 100; r < 10 {
		return strconv.FormatFloat(r, 'f', 2, 64) + " s"
	}
	total := int64(math.Round(sec))
	d, h, m, s := total/86400, total%86400/3600, total%3600/60, total%60
	switch {
	case total < 60:
		return fmt.Sprintf("%d s", s)
	case total < 3600:
		return joinUnits(m, "min", s, "s")
	case total < 86400:
		return joinUnits(h, "h", m, "min")
	}
	return joinUnits(d, "d", h, "h")
}

func joinUnits(a int64, aUnit string, b int64, bUnit string) string {
	if b == 0 {
		return fmt.Sprintf("%d %s", a, aUnit)
	}
	return fmt.Sprintf("%d %s %d %s", a, aUnit, b, bUnit)
}

// formatMillis is a step's or a table's duration in milliseconds.
func formatMillis(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return formatSeconds(float64(ms) / 1000)
}

// formatBytes is a size in IEC units (1 KiB = 1024 bytes), as the console
// shows it.
func formatBytes(n *int64) string {
	if n == nil {
		return "-"
	}
	if *n < 1024 {
		return fmt.Sprintf("%d B", *n)
	}
	// Rounded first to what is shown, so that 1048575 bytes are "1.0 MiB",
	// not "1024.0 KiB".
	v := float64(*n) / 1024
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	i := 0
	for math.Round(v*10)/10 >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', 1, 64) + " " + units[i]
}

// plural is "1 table" or "2 tables".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// warnDefaultPassword tells, on stderr, a user who logged in with the
// default password "admin" that anyone can guess it.
func warnDefaultPassword(w io.Writer, password string) {
	if password == db.DefaultAdminPassword {
		printf(w, "pgmirror: warning: your password is still the default %q, which anyone who can reach the service can guess; "+
			"change it with Change password in the web console (or POST /v1/auth/change-password)\n", db.DefaultAdminPassword)
	}
}
