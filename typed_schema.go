package shmarena

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// This file: a typed map's value-type fingerprint. OpenTypedMap records,
// in a small region of its own (kind KindSchema), a description of V: its
// type name and, for a struct, each encoded field's name and kind. A
// process that opens the map with another V gets ErrShape naming the
// fields that differ, unless it passes WithSchemaChange; without the
// record, a renamed field would silently read back as a zero value.

// KindSchema is the kind of the region where OpenTypedMap records a typed
// map's value type; Regions and Info list it, named "schema:" and 16 hex
// digits of a hash of the map's name.
const KindSchema RegionKind = 3

// Schema region layout: magic, description length, a write-sequence
// word (odd while the description is being rewritten), the description.
const (
	schemaMagic  = 0x31414d4548435321 // "!SCHEMA1"
	scMagic      = 0
	scLen        = 8
	scSeq        = 16
	scText       = 64
	schemaBytes  = 4096
	schemaMaxLen = schemaBytes - scText
)

func init() {
	kinds[KindSchema] = kindOps{validate: validateSchemaRegion, reset: func([]byte, layout.Entry) {}}
}

func validateSchemaRegion(b []byte, e layout.Entry) error {
	o := int(e.Offset)
	switch {
	case e.Length < schemaBytes:
		return fmt.Errorf("schema region of %d bytes", e.Length)
	case mem.Load64(b, o+scMagic) != schemaMagic:
		return fmt.Errorf("schema magic %#x", mem.Load64(b, o+scMagic))
	case mem.Load64(b, o+scLen) > schemaMaxLen:
		return fmt.Errorf("schema of %d bytes", mem.Load64(b, o+scLen))
	}
	return nil
}

// WithSchemaChange lets OpenTypedMap open a typed map whose recorded value
// type differs from V, for a deliberate schema change: it records V's
// description instead, so later openers with the old type get ErrShape.
// Values already stored keep their encoding and decode by msgpack's
// rules (missing fields read zero). Other opens ignore it.
func WithSchemaChange() RegionOption { return func(c *regionConfig) { c.schemaChange = true } }

// schemaName is the name of the schema region of map name.
func schemaName(name string) string {
	return fmt.Sprintf("schema:%016x", xxh3.HashString(name))
}

// describeType returns the fingerprint of t as lines: "type NAME", then
// "field NAME KIND" for each field a struct encodes, in order.
func describeType(t reflect.Type) string {
	var b strings.Builder
	fmt.Fprintf(&b, "type %s\n", typeName(t))
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return b.String()
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("msgpack"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		fmt.Fprintf(&b, "field %s %s\n", strconv.Quote(name), typeName(f.Type))
	}
	return b.String()
}

// typeName names a type without its package path ("User", "[]string",
// "map[string]int"), so two programs declaring the same struct in
// packages of their own agree.
func typeName(t reflect.Type) string {
	if t.Name() != "" {
		return t.Name()
	}
	s := t.String()
	if i := strings.LastIndex(s, "."); i >= 0 && t.Kind() == reflect.Struct {
		return s[i+1:]
	}
	return s
}

// diffSchema explains how description have (recorded) and want (this
// process's V) differ.
func diffSchema(have, want string) string {
	type field struct{ name, kind string }
	parse := func(s string) (typ string, fs []field) {
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			if t, ok := strings.CutPrefix(l, "type "); ok {
				typ = t
				continue
			}
			rest, _ := strings.CutPrefix(l, "field ")
			name, err := strconv.QuotedPrefix(rest)
			if err != nil {
				continue
			}
			fs = append(fs, field{name, strings.TrimSpace(rest[len(name):])})
		}
		return typ, fs
	}
	ht, hf := parse(have)
	wt, wf := parse(want)
	var out []string
	if ht != wt {
		out = append(out, fmt.Sprintf("type %s, recorded %s", wt, ht))
	}
	find := func(fs []field, name string) (field, bool) {
		i := slices.IndexFunc(fs, func(f field) bool { return f.name == name })
		if i < 0 {
			return field{}, false
		}
		return fs[i], true
	}
	for _, f := range wf {
		switch o, ok := find(hf, f.name); {
		case !ok:
			out = append(out, fmt.Sprintf("field %s %s is new", f.name, f.kind))
		case o.kind != f.kind:
			out = append(out, fmt.Sprintf("field %s is %s, recorded %s", f.name, f.kind, o.kind))
		}
	}
	for _, f := range hf {
		if _, ok := find(wf, f.name); !ok {
			out = append(out, fmt.Sprintf("field %s %s is gone", f.name, f.kind))
		}
	}
	return strings.Join(out, "; ")
}

// checkSchema records desc as map name's value type, or checks it against
// the one recorded. With change, a different record is replaced. A
// writable handle that finds no room for the record gets ErrArenaFull
// naming TypedMapBytes; a read-only one that finds no record, ErrCorrupt.
func (a *Arena) checkSchema(name, desc string, change bool) error {
	if len(desc) > schemaMaxLen {
		desc = desc[:schemaMaxLen] // the fields past it go unchecked
	}
	spec := regionSpec{
		name:   schemaName(name),
		kind:   KindSchema,
		length: schemaBytes,
		init: func(b []byte, off int64) {
			o := int(off)
			mem.Write(b, o+scText, desc)
			mem.Store64(b, o+scLen, uint64(len(desc)))
			mem.Store64(b, o+scMagic, schemaMagic)
		},
	}
	if a.readOnly && !a.hasRegion(spec.name) {
		return fmt.Errorf("shmarena: typed map %s: %w: its value-type record (region %s) is missing", quote(name), ErrCorrupt, quote(spec.name))
	}
	e, err := a.region(spec)
	switch {
	case err == nil:
	case errors.Is(err, ErrArenaFull):
		return fmt.Errorf("shmarena: typed map %s: no room for the record of its value type (%d bytes): size the arena with TypedMapBytes, which counts it: %w", quote(name), schemaBytes, err)
	default:
		return err
	}
	have, err := a.readSchema(e)
	if err != nil {
		return fmt.Errorf("shmarena: typed map %s: %w", quote(name), err)
	}
	if have == desc {
		return nil
	}
	if !change {
		return fmt.Errorf("shmarena: typed map %s: %w: its value type differs from the one recorded by the process that made it: %s (pass WithSchemaChange() to change the type deliberately)",
			quote(name), ErrShape, diffSchema(have, desc))
	}
	if err := a.refuse("typed map "+quote(name), "change the recorded value type"); err != nil {
		return err
	}
	return a.writeSchema(e, desc)
}

// readSchema reads a schema region's description, consistently with a
// writer (writeSchema makes the sequence odd while it writes).
func (a *Arena) readSchema(e layout.Entry) (string, error) {
	o := int(e.Offset)
	for tries := 0; tries < 1000; tries++ {
		seq := mem.Load64(a.mem, o+scSeq)
		n := mem.Load64(a.mem, o+scLen)
		if n > schemaMaxLen {
			return "", fmt.Errorf("%w: recorded value type of %d bytes", ErrCorrupt, n)
		}
		s := string(mem.AppendBytes(nil, a.mem, o+scText, int(n)))
		if seq&1 == 0 && mem.Load64(a.mem, o+scSeq) == seq {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: the recorded value type is being rewritten by a process that does not finish", ErrCorrupt)
}

// writeSchema replaces a schema region's description under the arena's
// file lock.
func (a *Arena) writeSchema(e layout.Entry, desc string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return ErrClosed
	}
	fd := a.own.Fd()
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("shmarena: schema %s: lock: %w", quote(e.Name), err)
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	o := int(e.Offset)
	seq := mem.Load64(a.mem, o+scSeq)
	mem.Store64(a.mem, o+scSeq, seq|1)
	mem.Zero(a.mem, o+scText, schemaMaxLen)
	mem.Write(a.mem, o+scText, desc)
	mem.Store64(a.mem, o+scLen, uint64(len(desc)))
	mem.Store64(a.mem, o+scSeq, (seq|1)+1)
	return nil
}

// hasRegion reports whether the arena has a ready region named name.
func (a *Arena) hasRegion(name string) bool {
	return slices.ContainsFunc(a.readyEntries(), func(e layout.Entry) bool { return e.Name == name })
}

// freeBytes returns how many bytes are left to carve, as this handle sees
// the header now (other processes may carve meanwhile).
func (a *Arena) freeBytes() int64 {
	if a.closed.Load() {
		return 0
	}
	defer runtime.KeepAlive(a)
	return int64(len(a.mem)) - layout.ReadHeader(a.mem).NextFree
}
