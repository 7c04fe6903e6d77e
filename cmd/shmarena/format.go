package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// bytesText renders n bytes with a binary unit: "512 B", "4.0 MiB".
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// durationText renders d rounded for people: "1.5s", "3m12s", "-".
func durationText(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// ago renders a moment as a date and how long ago it was.
func ago(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format("2006-01-02 15:04:05 UTC"), durationText(now.Sub(t)))
}

// percent renders part of whole: "12.5%".
func percent(part, whole int64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// label turns a Go field name into words: "DeadLettered" -> "dead-lettered",
// "OldestPending" -> "oldest pending".
func label(field string) string {
	if field == "DeadLettered" {
		return "dead-lettered"
	}
	var b strings.Builder
	for i, r := range field {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// numericFields returns the exported integer fields of struct v, in
// order, as name and value: the counters a Stats type carries, whatever
// the library version adds.
func numericFields(v any) (names []string, vals []int64) {
	rv := reflect.ValueOf(v)
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		switch fv := rv.Field(i); fv.Kind() {
		case reflect.Int, reflect.Int64, reflect.Int32:
			if f.Type == reflect.TypeFor[time.Duration]() {
				continue
			}
			names, vals = append(names, f.Name), append(vals, fv.Int())
		case reflect.Uint, reflect.Uint64, reflect.Uint32:
			names, vals = append(names, f.Name), append(vals, int64(fv.Uint()))
		}
	}
	return names, vals
}

// table writes aligned columns. Every row keeps all its cells, empty ones
// too, because tabwriter ends a column at a line with fewer cells (a row
// without a rate cut the rate column in two); flush trims the padding
// that leaves at line ends.
type table struct {
	w   io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	t := &table{w: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

func (t *table) row(cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(t.tw, "\t")
		}
		fmt.Fprint(t.tw, c)
	}
	fmt.Fprint(t.tw, "\n")
}

func (t *table) flush() {
	t.tw.Flush()
	for _, line := range strings.SplitAfter(t.buf.String(), "\n") {
		if strings.HasSuffix(line, "\n") {
			line = strings.TrimRight(line[:len(line)-1], " ") + "\n"
		}
		fmt.Fprint(t.w, line)
	}
	t.buf.Reset()
}

// printable reports whether b reads as text: valid UTF-8 without control
// characters other than tab and newline.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\t' && r != '\n' {
			return false
		}
	}
	return true
}

// showBytes renders a key or payload on one line: as is when printable
// (quoted when it has spaces or is empty), else Go-quoted.
func showBytes(b []byte) string {
	if printable(b) && len(b) > 0 && !strings.ContainsAny(string(b), " \t\n\"") {
		return string(b)
	}
	return fmt.Sprintf("%q", b)
}

// hexView is the hex dump shown for a value that is not text.
func hexView(b []byte) string { return hex.Dump(b) }
