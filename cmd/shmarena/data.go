package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shmarena/shmarena"
	"github.com/vmihailenco/msgpack/v5"
)

// openMap attaches to path (read-only unless write) and finds map name,
// reporting whether it is a typed map (msgpack values).
func openMap(path, name string, write bool) (*shmarena.Arena, *shmarena.Map, bool, error) {
	open := openRead
	if write {
		open = openWrite
	}
	a, err := open(path)
	if err != nil {
		return nil, nil, false, err
	}
	m, err := a.LookupMap(name)
	if err != nil {
		a.Close()
		return nil, nil, false, err
	}
	typed := false
	for _, r := range a.Regions() {
		if r.Name == name && r.Kind == shmarena.KindMap {
			typed = r.Typed
		}
	}
	return a, m, typed, nil
}

func keysFlags(fs *flag.FlagSet) {
	fs.String("prefix", "", "only keys starting with `prefix`")
	fs.Int("limit", 1000, "print at most `n` keys (0: all)")
}

func runKeys(e *env, fs *flag.FlagSet, args []string) error {
	prefix := fs.Lookup("prefix").Value.String()
	limit := fs.Lookup("limit").Value.(flag.Getter).Get().(int)
	a, m, _, err := openMap(args[0], args[1], false)
	if err != nil {
		return err
	}
	defer a.Close()
	keys := []string{}
	more := false
	for k := range m.Keys() {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if limit > 0 && len(keys) == limit {
			more = true
			break
		}
		keys = append(keys, k)
	}
	if e.json {
		out := struct {
			Keys      []keyJSON
			Truncated bool
		}{Keys: []keyJSON{}, Truncated: more}
		for _, k := range keys {
			out.Keys = append(out.Keys, jsonKey(k))
		}
		return e.printJSON(out)
	}
	for _, k := range keys {
		fmt.Fprintln(e.stdout, showBytes([]byte(k)))
	}
	if more {
		fmt.Fprintf(e.stderr, "(stopped at --limit %d; --limit 0 lists all)\n", limit)
	}
	return nil
}

// decodeTyped decodes a typed map's msgpack value into something
// encoding/json can write (maps with non-string keys get string keys).
func decodeTyped(b []byte) (any, error) {
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("shmarena: value does not decode as msgpack: %w", err)
	}
	return jsonable(v), nil
}

func jsonable(v any) any {
	switch x := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[fmt.Sprint(k)] = jsonable(val)
		}
		return out
	case map[string]any:
		for k, val := range x {
			x[k] = jsonable(val)
		}
		return x
	case []any:
		for i, val := range x {
			x[i] = jsonable(val)
		}
		return x
	}
	return v
}

// entry is one key's value as get and dump see it.
type entry struct {
	value   []byte
	counter *int64
	ttl     time.Duration // 0: no deadline
}

// read returns key's entry, or ok false when it is absent.
func read(m *shmarena.Map, key string) (entry, bool) {
	v, ok := m.Load(key)
	if !ok {
		return entry{}, false
	}
	var e entry
	e.value = v
	if n, ok := m.Counter(key); ok {
		e.counter = &n
	}
	e.ttl, _ = m.TTL(key)
	return e, true
}

// keyJSON is a key in JSON output: Key when it is UTF-8 text, else its
// bytes in KeyBase64 (as dump writes it; get, del, set, ttl and incr take
// it back with --base64).
type keyJSON struct {
	Key       *string `json:"key,omitempty"`
	KeyBase64 []byte  `json:"key_base64,omitempty"`
}

func jsonKey(k string) keyJSON {
	if utf8.ValidString(k) {
		return keyJSON{Key: &k}
	}
	return keyJSON{KeyBase64: []byte(k)}
}

// keyFlags are the flags of the subcommands that name one key.
func keyFlags(fs *flag.FlagSet) {
	fs.Bool("base64", false, "KEY is base64, as keys --json and dump print a key that is not UTF-8")
}

// keyArg returns the KEY argument, decoded with --base64.
func keyArg(fs *flag.FlagSet, arg string) (string, error) {
	if !flagBool(fs, "base64") {
		return arg, nil
	}
	b, err := base64.StdEncoding.DecodeString(arg)
	if err != nil {
		return "", fmt.Errorf("shmarena: --base64: key %q: %w", arg, err)
	}
	return string(b), nil
}

func runGet(e *env, fs *flag.FlagSet, args []string) error {
	key, err := keyArg(fs, args[2])
	if err != nil {
		return err
	}
	a, m, typed, err := openMap(args[0], args[1], false)
	if err != nil {
		return err
	}
	defer a.Close()
	en, ok := read(m, key)
	if !ok {
		fmt.Fprintf(e.stderr, "shmarena get: map %q has no key %q (or it lapsed)\n", args[1], key)
		return errNo
	}
	var decoded any
	if typed {
		if decoded, err = decodeTyped(en.value); err != nil {
			return err
		}
	}
	if e.json {
		out := struct {
			keyJSON
			Value   []byte
			Text    *string        `json:",omitempty"`
			Counter *int64         `json:",omitempty"`
			Decoded any            `json:",omitempty"`
			TTL     *time.Duration // null: no deadline
		}{keyJSON: jsonKey(key), Value: en.value, Counter: en.counter, Decoded: decoded}
		if en.ttl > 0 {
			out.TTL = &en.ttl
		}
		if printable(en.value) && !typed && en.counter == nil {
			s := string(en.value)
			out.Text = &s
		}
		return e.printJSON(out)
	}
	switch {
	case en.counter != nil:
		fmt.Fprintln(e.stdout, *en.counter)
	case typed:
		b, err := json.Marshal(decoded)
		if err != nil {
			return fmt.Errorf("shmarena get: %w", err)
		}
		fmt.Fprintln(e.stdout, string(b))
	case printable(en.value):
		fmt.Fprintln(e.stdout, string(en.value))
	default:
		fmt.Fprintf(e.stdout, "%d bytes, not text:\n%s", len(en.value), hexView(en.value))
	}
	if en.ttl > 0 { // on stderr: stdout stays the value alone, for pipes
		fmt.Fprintf(e.stderr, "(ttl %s)\n", durationText(en.ttl))
	}
	return nil
}

// runDel deletes a key. A missing key is a "no" (exit 1) with and
// without --json.
func runDel(e *env, fs *flag.FlagSet, args []string) error {
	key, err := keyArg(fs, args[2])
	if err != nil {
		return err
	}
	a, m, _, err := openMap(args[0], args[1], true)
	if err != nil {
		return err
	}
	defer a.Close()
	ok := m.Delete(key)
	switch {
	case e.json:
		if err := e.printJSON(struct{ Deleted bool }{ok}); err != nil {
			return err
		}
	case ok:
		fmt.Fprintf(e.stdout, "deleted %s\n", showBytes([]byte(key)))
	default:
		fmt.Fprintf(e.stderr, "shmarena del: map %q has no key %q\n", args[1], key)
	}
	if !ok {
		return errNo
	}
	return nil
}

// dumpLine is one line of dump's output and load's input. A key that is
// not valid UTF-8 goes in KeyBase64 (JSON strings cannot carry it); a
// counter's value is Counter, a number; TTLms is the time left, in
// milliseconds (absent: no deadline).
type dumpLine struct {
	Key       *string `json:"key,omitempty"`
	KeyBase64 []byte  `json:"key_base64,omitempty"`
	Value     []byte  `json:"value,omitempty"`
	Counter   *int64  `json:"counter,omitempty"`
	TTLms     int64   `json:"ttl_ms,omitempty"`
}

func runDump(e *env, fs *flag.FlagSet, args []string) error {
	a, m, _, err := openMap(args[0], args[1], false)
	if err != nil {
		return err
	}
	defer a.Close()
	w := bufio.NewWriter(e.stdout)
	enc := json.NewEncoder(w)
	n := 0
	for k := range m.Keys() {
		en, ok := read(m, k)
		if !ok {
			continue // deleted or lapsed meanwhile
		}
		l := dumpLine{Counter: en.counter}
		if utf8.ValidString(k) {
			l.Key = &k
		} else {
			l.KeyBase64 = []byte(k)
		}
		if en.counter == nil {
			l.Value = en.value
		}
		if en.ttl > 0 {
			l.TTLms = max(en.ttl.Milliseconds(), 1)
		}
		if err := enc.Encode(l); err != nil {
			return err
		}
		n++
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "dumped %d entries of map %q\n", n, args[1])
	return nil
}

func runLoad(e *env, fs *flag.FlagSet, args []string) error {
	a, m, _, err := openMap(args[0], args[1], true)
	if err != nil {
		return err
	}
	defer a.Close()
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	n := 0
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l dumpLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("shmarena load: line %d: %w (%d entries stored before it)", line, err, n)
		}
		key := string(l.KeyBase64)
		if l.Key != nil {
			key = *l.Key
		}
		var opts []shmarena.WriteOption
		if l.TTLms > 0 {
			opts = append(opts, shmarena.WithTTL(time.Duration(l.TTLms)*time.Millisecond))
		}
		if l.Counter != nil {
			m.Delete(key) // Add adds: start from nothing
			_, err = m.Add(key, *l.Counter, opts...)
		} else {
			err = m.Store(key, l.Value, opts...)
		}
		if err != nil {
			return fmt.Errorf("shmarena load: line %d: %w (%d entries stored before it)", line, err, n)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("shmarena load: reading input: %w (%d entries stored)", err, n)
	}
	if e.json {
		return e.printJSON(struct{ Loaded int }{n})
	}
	fmt.Fprintf(e.stdout, "loaded %d entries into map %q\n", n, args[1])
	return nil
}

func runClear(e *env, fs *flag.FlagSet, args []string) error {
	a, m, _, err := openMap(args[0], args[1], true)
	if err != nil {
		return err
	}
	defer a.Close()
	before := m.Len()
	if err := e.confirm(flagBool(fs, "yes"), fmt.Sprintf("delete all %d keys of map %q in %s?", before, args[1], args[0])); err != nil {
		return err
	}
	m.Clear()
	if e.json {
		return e.printJSON(struct{ Before, After int }{before, m.Len()})
	}
	fmt.Fprintf(e.stdout, "cleared map %q: %d keys before, %d now\n", args[1], before, m.Len())
	return nil
}
