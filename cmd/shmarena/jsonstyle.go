package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"time"
	"unicode"
)

// This file: one JSON convention for every subcommand. Field names are
// snake_case ("slot_size", "key_base64"); a duration is a whole number of
// milliseconds whose name says so ("ttl_ms", "oldest_pending_ms"); a time
// is RFC 3339 text. printJSON passes everything through styled, so a field
// a later library version adds follows the convention too.

// styled returns v as JSON-ready values with the convention applied.
func styled(v any) any { return styleValue(reflect.ValueOf(v)) }

var (
	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
	textType     = reflect.TypeFor[encoding.TextMarshaler]()
)

func styleValue(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).Milliseconds()
	case v.Type() == timeType:
		t := v.Interface().(time.Time)
		if t.IsZero() {
			return nil
		}
		return t.UTC().Format(time.RFC3339Nano)
	case v.Type().Implements(textType) && v.Kind() != reflect.Pointer:
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err == nil {
			return string(b)
		}
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return styleValue(v.Elem())
	case reflect.Struct:
		return styleStruct(v)
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Bytes() // base64, as encoding/json writes it
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = styleValue(v.Index(i))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			out[it.Key().String()] = styleValue(it.Value())
		}
		return out
	}
	return v.Interface()
}

func styleStruct(v reflect.Value) object {
	var out object
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		fv := v.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && name == "" {
			out = append(out, styleStruct(fv)...) // its fields, inline, as encoding/json does
			continue
		}
		if !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "omitempty") && fv.IsZero() {
			continue
		}
		if name == "" {
			name = snakeCase(f.Name)
			if f.Type == durationType || f.Type.Kind() == reflect.Pointer && f.Type.Elem() == durationType {
				name += "_ms"
			}
		}
		out = append(out, member{name, styleValue(fv)})
	}
	return out
}

// An object keeps its members in the struct's order.
type object []member

type member struct {
	name  string
	value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.name)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// snakeCase turns a Go name into snake_case: "SlotSize" -> "slot_size",
// "TTL" -> "ttl", "BootID" -> "boot_id", "KeyBase64" -> "key_base64".
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
