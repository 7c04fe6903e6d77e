package shmarena

import (
	"bytes"
	"encoding"
	"fmt"
	"iter"
	"math"
	"reflect"
	"slices"
	"sync"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/vmihailenco/msgpack/v5"
)

// A TypedMap is a Map whose values are Go values of type V, stored as their
// msgpack encoding (github.com/vmihailenco/msgpack/v5). Keys are strings of
// bytes, as in a Map. Every read decodes into a fresh V, so a value returned
// to one caller shares nothing with the mapping, with another caller or with
// a later read; change it and Store it back to make the change visible.
//
// Encoding is deterministic: struct fields go out in declaration order and
// the entries of every map, at any depth, in a canonical order, so two
// equal values encode to equal bytes. CompareAndSwap relies on this: it
// compares encodings, not values (the rule Hazelcast's IMap follows for
// its replace and remove-if-equal operations). So a nil and an empty slice
// or map, or +0.0 and -0.0, do not match although a Go program may treat
// them alike, while a NaN matches a NaN; a time.Time is encoded as its
// instant only, so the same instant in two locations matches.
//
// Decoding follows msgpack's rules, which are encoding/json's: fields of V
// missing from an encoding are left zero and fields of the encoding that V
// lacks are ignored, so a struct may gain fields while old values are still
// stored. A time.Time comes back as the same instant in time.Local, without
// its monotonic reading; compare times with Equal. Unexported struct fields
// are not stored. A value whose bytes are not well-formed msgpack (damaged)
// is reported as ErrCorrupt, and well-formed msgpack that does not decode
// as V (written through the byte view) as ErrTypeMismatch naming V, never
// as a zero V.
//
// Whether a map holds encoded values is part of its shape: opening with
// OpenTypedMap a region created with Arena.Map, or the reverse, fails with
// ErrShape naming the encoded flag. The byte view (Bytes) of a TypedMap
// refuses Add with ErrEncoded and reports no counters.
//
// A TypedMap's methods are safe for concurrent use by goroutines and
// processes, with the Map's guarantees: each operation is atomic with
// respect to every other operation on the same key in any process.
type TypedMap[V any] struct {
	m     *Map
	canon bool // V may contain maps the encoder does not sort
}

// OpenTypedMap returns the typed map named name in arena a, creating it
// with the given shape if the arena has no region of that name. Options and
// defaults are Arena.Map's; MaxPair (slot size minus 32 bytes) bounds
// len(key) plus the length of a value's encoding. Every process must open
// it with the same shape and as a typed map, with the same V: the first
// opener records V's fingerprint (its type name without package path, and
// each encoded field's name and type) in a 4 KiB region of kind
// KindSchema, and an opener whose V differs gets ErrShape naming the
// fields that differ, unless it passes WithSchemaChange (which records the
// new V). The record is carved before the map, so every typed map has
// one: size an arena for typed maps with TypedMapBytes, which counts it.
// Errors: ErrInvalid for an option out of range or a bad name, ErrShape
// (naming the field, "encoded flag" when the region is a byte map) when
// the region exists with another shape or kind or V differs, ErrArenaFull
// when there is no room for the map and its record (nothing is carved
// then, unless the record fitted alone), ErrCorrupt when an existing
// typed map's record is missing or damaged, ErrReadOnly when a read-only handle would have to create it or
// record a changed V, ErrClosed after Close. Safe for concurrent use;
// carving is serialised across processes.
func OpenTypedMap[V any](a *Arena, name string, opts ...RegionOption) (_ *TypedMap[V], err error) {
	// It reads the directory and the value type's record itself, not
	// through Arena.Map: the guard is its own.
	defer catchFault(a, guard(), &err)
	cfg, err := mapShape(true, opts)
	if err != nil {
		return nil, fmt.Errorf("shmarena: map %s: %w", quote(name), err)
	}
	if a.closed.Load() {
		return nil, ErrClosed
	}
	desc := describeType(reflect.TypeFor[V]())
	var m *Map
	if !a.readOnly && !a.hasRegion(name) {
		// A new map: its record first, so that no typed map is ever
		// without one, and an arena too small for both gets neither.
		need := layout.Align(schemaBytes) + layout.Align(regionLength(cfg))
		if free := a.freeBytes(); free < need {
			return nil, fmt.Errorf("shmarena: typed map %s: %w: it and the record of its value type need %d bytes, %d free: size the arena with TypedMapBytes", quote(name), ErrArenaFull, need, free)
		}
		if err := a.checkSchema(name, desc, cfg.schemaChange); err != nil {
			return nil, err
		}
	}
	if m, err = a.openMap(name, true, opts); err != nil {
		return nil, err
	}
	if err := a.checkSchema(name, desc, cfg.schemaChange); err != nil {
		return nil, err
	}
	return &TypedMap[V]{m: m, canon: mayHoldUnsortedMap(reflect.TypeFor[V](), map[reflect.Type]bool{})}, nil
}

// TypedMapBytes returns how many bytes of an arena a typed map of the
// given shape occupies: MapBytes and the 4 KiB record of its value type.
// An arena of MinSize plus the sum of its regions' sizes holds them all.
// It returns ErrInvalid for a shape out of range.
func TypedMapBytes(opts ...RegionOption) (int64, error) {
	n, err := MapBytes(opts...)
	if err != nil {
		return 0, err
	}
	return n + layout.Align(schemaBytes), nil
}

// Bytes returns the underlying byte map, which sees each value's msgpack
// encoding. Writing bytes through it that do not decode as V makes reads
// of that key through the TypedMap fail with ErrCorrupt.
func (t *TypedMap[V]) Bytes() *Map { return t.m }

// Name returns the region name.
func (t *TypedMap[V]) Name() string { return t.m.name }

// Len returns the number of live entries, as Map.Len does.
func (t *TypedMap[V]) Len() int { return t.m.Len() }

// Store sets key to value, replacing any entry; the deadline rules and
// options are Map.Store's (WithTTL gives a deadline, WithKeepTTL keeps the
// current one, else none). Errors: ErrEncode (wrapped with msgpack's
// reason) for a value msgpack cannot encode, such as a func or a chan;
// ErrTooLarge when len(key) plus the encoding exceeds MaxPair; ErrEmptyKey;
// ErrFull for a new key in a full table; ErrClosed. A refused Store changes
// nothing.
func (t *TypedMap[V]) Store(key string, value V, opts ...WriteOption) (err error) {
	defer catchFault(t.m.a, guard(), &err)
	st := getEnc()
	defer putEnc(st)
	b, err := t.encode(st, &value)
	if err != nil {
		return err
	}
	return t.m.Store(key, b, opts...)
}

// Load returns a freshly decoded copy of key's value and true, or the zero
// V and false when the key is absent, lapsed, busy (see Stats.Busy) or the
// arena is closed. It returns an error wrapping ErrCorrupt, with false,
// when the stored bytes are not well-formed msgpack, and ErrTypeMismatch
// when they do not decode as V. Lock-free, as Map.Load.
func (t *TypedMap[V]) Load(key string) (value V, ok bool, err error) {
	defer catchFault(t.m.a, guard(), &err)
	bp := getBuf()
	defer putBuf(bp)
	b, ok := t.m.AppendLoad((*bp)[:0], key)
	*bp = b
	if !ok {
		return value, false, nil
	}
	if err := t.decode(key, b, &value); err != nil {
		var zero V
		return zero, false, err
	}
	return value, true, nil
}

// Exists reports whether key is present and not lapsed, without decoding.
func (t *TypedMap[V]) Exists(key string) bool { return t.m.Exists(key) }

// LoadOrStore returns the existing value for key (loaded true) if present,
// else stores value with opts and returns it (loaded false), as sync.Map's
// LoadOrStore does, atomically across processes. value is encoded first,
// so an unencodable value is ErrEncode even when key is present. Errors as
// for Store, and ErrCorrupt when the existing bytes do not decode (nothing
// changes then).
func (t *TypedMap[V]) LoadOrStore(key string, value V, opts ...WriteOption) (actual V, loaded bool, err error) {
	defer catchFault(t.m.a, guard(), &err)
	st := getEnc()
	defer putEnc(st)
	b, err := t.encode(st, &value)
	if err != nil {
		return actual, false, err
	}
	old, loaded, err := t.m.LoadOrStore(key, b, opts...)
	if err != nil {
		return actual, false, err
	}
	if !loaded {
		return value, false, nil
	}
	if err := t.decode(key, old, &actual); err != nil {
		var zero V
		return zero, true, err
	}
	return actual, true, nil
}

// Delete removes key and reports whether it was present, as Map.Delete.
// It does not decode the value. False after Close.
func (t *TypedMap[V]) Delete(key string) bool { return t.m.Delete(key) }

// Clear removes every entry, as Map.Clear does.
func (t *TypedMap[V]) Clear() { t.m.Clear() }

// CompareAndSwap stores new for key if the current value's encoding equals
// old's, byte for byte, keeping the entry's deadline, and reports whether
// it swapped; an absent or lapsed key never matches. It compares
// encodings, as Hazelcast's IMap.replace(key, old, new) compares serialised
// forms, so see the TypedMap notes on values that are equal in Go but not
// in encoding. Atomic across processes. Errors: ErrEncode (old or new),
// ErrTooLarge (new), ErrEmptyKey, ErrClosed.
func (t *TypedMap[V]) CompareAndSwap(key string, old, new V) (swapped bool, err error) {
	defer catchFault(t.m.a, guard(), &err)
	so, sn := getEnc(), getEnc()
	defer putEnc(so)
	defer putEnc(sn)
	ob, err := t.encode(so, &old)
	if err != nil {
		return false, err
	}
	nb, err := t.encode(sn, &new)
	if err != nil {
		return false, err
	}
	return t.m.CompareAndSwap(key, ob, nb)
}

// Update replaces key's value with what fn makes of it, atomically across
// processes: fn runs while this process holds the lock of key's stripe,
// so concurrent Updates of one key, from any goroutine or process,
// serialise, and no other write to the key lands between the read and the
// write. This is Hazelcast's IMap.executeOnKey with an entry processor,
// for one key on one host.
//
// fn receives a freshly decoded copy of the current value and true, or the
// zero V and false when the key is absent or lapsed. It returns the new
// value and keep; keep false deletes the key (a no-op when absent). The
// entry keeps its deadline unless opts has WithTTL, even a deadline that
// passes while fn runs (the value is then written already lapsed); a key
// Update creates, fn having got false, has none unless opts has WithTTL. Update returns the value fn returned
// (the zero V when the key was deleted).
//
// fn must be short, since every writer of a key on the same stripe waits
// for it, and must not call any method of this map (or of its byte view)
// or wait for a process that might: the lock is not reentrant and that
// would deadlock. A panic in fn releases the lock, stores nothing and
// propagates. A process that dies inside fn leaves the entry unchanged;
// the next writer recovers the lock.
//
// Errors, all leaving the entry unchanged: ErrCorrupt (the current bytes do
// not decode; fn is not called), ErrEncode and ErrTooLarge (for the value fn
// returned), ErrFull (a new key in a full table), ErrEmptyKey, ErrClosed.
func (t *TypedMap[V]) Update(key string, fn func(old V, ok bool) (V, bool), opts ...WriteOption) (_ V, err error) {
	defer catchFault(t.m.a, guard(), &err)
	var result V
	c, err := t.m.writeOpts(opts)
	if err != nil {
		return result, err
	}
	st := getEnc()
	defer putEnc(st)
	err = t.m.update(key, c, func(oldb []byte, ok bool) ([]byte, bool, error) {
		var old V
		if ok {
			if err := t.decode(key, oldb, &old); err != nil {
				return nil, false, err
			}
		}
		nv, keep := fn(old, ok)
		if !keep {
			return nil, false, nil
		}
		b, err := t.encode(st, &nv)
		if err != nil {
			return nil, false, err
		}
		result = nv
		return b, true, nil
	})
	if err != nil {
		var zero V
		return zero, err
	}
	return result, nil
}

// All returns an iterator over the live entries in table order, yielding
// each key with a freshly decoded value, with Map.All's snapshot rules:
// each entry is read consistently, but entries stored or deleted while it
// runs may or may not appear. An entry whose bytes do not decode as V is
// skipped, not yielded as a zero V; Load of that key reports ErrCorrupt,
// and Bytes().Keys() lists every key. Empty after Close.
func (t *TypedMap[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for k, b := range t.m.All() {
			var v V
			if t.decode(k, b, &v) != nil {
				continue
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// update runs fn holding key's stripe lock. fn gets the live value (valid
// only during the call; nil and false when absent or lapsed) and returns
// the new value and keep; keep false deletes the key. An error from fn,
// or a panic, leaves the slot unchanged; the lock is released either way.
// Without WithTTL in c the entry keeps its deadline.
func (m *Map) update(key string, c writeConfig, fn func(old []byte, ok bool) ([]byte, bool, error)) (err error) {
	if err := m.refuse("update"); err != nil {
		return err
	}
	if err := m.check(key, 0); err != nil {
		return err
	}
	if !c.ttlSet {
		c.keepTTL = true
	}
	h := m.hashKey(key)
	s := m.stripeOf(h)
	bp := getBuf()
	defer putBuf(bp)
	if !m.lock(s) {
		return m.a.closedErr()
	}
	defer m.unlockErr(s, &err)
	v, found := m.find(key, h)
	live := found && !lapsed(v.deadline)
	var old []byte
	if live {
		old = m.appendValue((*bp)[:0], v.off, v.meta)
		*bp = old
	}
	nb, keep, err := fn(old, live)
	if err != nil {
		return err
	}
	if !keep {
		if found && m.remove(s, v) && !live {
			m.stat(mhExpired)
		}
		return nil
	}
	if err := m.checkPair(len(key), len(nb)); err != nil {
		return err
	}
	// The write follows the liveness fn was given, decided once above: an
	// entry that lapses while fn runs keeps its deadline (now past), rather
	// than being taken for a new key and written with none. The key's slot
	// is as find saw it, since only holders of its stripe change it.
	if found && !live {
		m.stat(mhExpired)
	}
	v, free, found := m.locate(key, h, s)
	v, free, found, err = m.roomFor(s, key, h, len(nb), v, free, found)
	if err != nil {
		return err
	}
	e := entry{key: key, h: h, val: nb, deadline: deadlineFor(c, v, live)}
	return m.put(s, &e, v, free, found)
}

// --- encoding ---

// maxPooled is the largest buffer kept for reuse, in bytes.
const maxPooled = 64 << 10

type encState struct {
	buf bytes.Buffer
	cb  []byte // the canonical form, when V needs one
	enc *msgpack.Encoder
}

var encPool = sync.Pool{New: func() any {
	st := new(encState)
	st.enc = msgpack.NewEncoder(&st.buf)
	st.enc.SetSortMapKeys(true)
	return st
}}

func getEnc() *encState { return encPool.Get().(*encState) }

func putEnc(st *encState) {
	if st.buf.Cap() > maxPooled || cap(st.cb) > maxPooled {
		return
	}
	encPool.Put(st)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooled {
		bufPool.Put(b)
	}
}

type decState struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decPool = sync.Pool{New: func() any {
	st := new(decState)
	st.dec = msgpack.NewDecoder(&st.r)
	return st
}}

// encode returns v's encoding in st's buffers, valid until st is reused.
func (t *TypedMap[V]) encode(st *encState, v *V) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("shmarena: map %s: %w: %v", quote(t.m.name), ErrEncode, p)
		}
	}()
	st.buf.Reset()
	if err := st.enc.Encode(v); err != nil {
		return nil, fmt.Errorf("shmarena: map %s: %w: %v", quote(t.m.name), ErrEncode, err)
	}
	b = st.buf.Bytes()
	if t.canon {
		c, rest, err := canonical(st.cb[:0], b, 0)
		if err == nil && len(rest) != 0 {
			err = fmt.Errorf("%d bytes after the value", len(rest))
		}
		if err != nil {
			return nil, fmt.Errorf("shmarena: map %s: %w: canonical form: %v", quote(t.m.name), ErrEncode, err)
		}
		st.cb = c
		b = c
	}
	return b, nil
}

// decode decodes one whole value from b into v. Anything else (a decode
// error, trailing bytes, a panic in the decoder) is ErrCorrupt.
func (t *TypedMap[V]) decode(key string, b []byte, v *V) (err error) {
	st := decPool.Get().(*decState)
	st.r.Reset(b)
	st.dec.Reset(&st.r)
	st.dec.SetMapDecoder(decodeAnyMap)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("shmarena: map %s: key %s: %w: decoder panicked: %v", quote(t.m.name), quote(key), ErrCorrupt, p)
			return // the decoder's state is unknown: do not pool it
		}
		st.r.Reset(nil)
		decPool.Put(st)
	}()
	// msgpack sizes a collection by its declared count before reading it,
	// so a corrupt count could exhaust memory: check every count first.
	if err := msgpackValid(b); err != nil {
		return fmt.Errorf("shmarena: map %s: key %s: %w: %v", quote(t.m.name), quote(key), ErrCorrupt, err)
	}
	if err := st.dec.Decode(v); err != nil { // well-formed msgpack, of another type
		return fmt.Errorf("shmarena: map %s: key %s: %w: the stored value does not decode as %s: %v", quote(t.m.name), quote(key), ErrTypeMismatch, reflect.TypeFor[V](), err)
	}
	if n := st.r.Len(); n != 0 {
		return fmt.Errorf("shmarena: map %s: key %s: %w: %d bytes after the value", quote(t.m.name), quote(key), ErrCorrupt, n)
	}
	return nil
}

// decodeAnyMap decodes a map met where the target is an interface: as a
// map[string]any when every key is a string (msgpack's default), else as a
// map[any]any, where msgpack's default refuses non-string keys and would
// make a map[int]T stored in an interface unreadable.
func decodeAnyMap(d *msgpack.Decoder) (any, error) {
	n, err := d.DecodeMapLen()
	if err != nil || n == -1 {
		return nil, err
	}
	sm := make(map[string]any, min(n, 1024))
	var um map[any]any
	for range n {
		k, err := d.DecodeInterface()
		if err != nil {
			return nil, err
		}
		v, err := d.DecodeInterface()
		if err != nil {
			return nil, err
		}
		if ks, ok := k.(string); ok && um == nil {
			sm[ks] = v
			continue
		}
		if um == nil {
			um = make(map[any]any, min(n, 1024))
			for k, v := range sm {
				um[k] = v
			}
		}
		if k != nil && !reflect.TypeOf(k).Comparable() {
			return nil, fmt.Errorf("map key of type %T", k)
		}
		um[k] = v
	}
	if um != nil {
		return um, nil
	}
	return sm, nil
}

// --- canonical form ---

var (
	customEncoderType   = reflect.TypeFor[msgpack.CustomEncoder]()
	marshalerType       = reflect.TypeFor[msgpack.Marshaler]()
	binaryMarshalerType = reflect.TypeFor[encoding.BinaryMarshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
)

// mayHoldUnsortedMap reports whether an encoding of a t may contain a map
// whose entries the encoder emits in Go's random map order. SetSortMapKeys
// sorts only map[string]string, map[string]bool and map[string]any (and
// the last's values may be maps of any type), so every other map type, an
// interface, or a type encoding itself, needs the canonical pass.
func mayHoldUnsortedMap(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	pt := reflect.PointerTo(t)
	for _, it := range []reflect.Type{customEncoderType, marshalerType} {
		if t.Implements(it) || pt.Implements(it) {
			return true
		}
	}
	for _, it := range []reflect.Type{binaryMarshalerType, textMarshalerType} {
		if t.Implements(it) || pt.Implements(it) {
			return false // encoded as opaque bytes or a string
		}
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Map:
		if t.Key() == reflect.TypeFor[string]() {
			switch t.Elem() {
			case reflect.TypeFor[string](), reflect.TypeFor[bool]():
				return false
			}
		}
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return mayHoldUnsortedMap(t.Elem(), seen)
	case reflect.Struct:
		for f := range t.Fields() {
			if (f.IsExported() || f.Anonymous) && mayHoldUnsortedMap(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// maxDepth bounds the nesting the canonical pass follows.
const maxDepth = 10000

// canonical appends to dst the msgpack value at the start of src with the
// entries of every map sorted by their encoded keys, and returns the rest
// of src. Two encodings that differ only in map order come out equal.
func canonical(dst, src []byte, depth int) (out, rest []byte, err error) {
	if depth > maxDepth {
		return nil, nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	head, n, isMap, err := msgpackHead(src)
	if err != nil {
		return nil, nil, err
	}
	if n < 0 { // a scalar of head bytes
		return append(dst, src[:head]...), src[head:], nil
	}
	dst = append(dst, src[:head]...)
	src = src[head:]
	if !isMap {
		for range n {
			if dst, src, err = canonical(dst, src, depth+1); err != nil {
				return nil, nil, err
			}
		}
		return dst, src, nil
	}
	// Canonicalise each key and value into scratch, then emit the entries
	// in key order.
	type entry struct{ k, kv []byte }
	entries := make([]entry, 0, min(n, 1024))
	var scratch []byte
	for range n {
		start := len(scratch)
		if scratch, src, err = canonical(scratch, src, depth+1); err != nil {
			return nil, nil, err
		}
		mid := len(scratch)
		if scratch, src, err = canonical(scratch, src, depth+1); err != nil {
			return nil, nil, err
		}
		entries = append(entries, entry{k: scratch[start:mid:mid], kv: scratch[start:len(scratch):len(scratch)]})
	}
	// Equal keys (NaNs) are ordered by their values, so the order is total.
	slices.SortFunc(entries, func(a, b entry) int {
		if c := bytes.Compare(a.k, b.k); c != 0 {
			return c
		}
		return bytes.Compare(a.kv, b.kv)
	})
	for _, e := range entries {
		dst = append(dst, e.kv...)
	}
	return dst, src, nil
}

// msgpackValid checks that b is exactly one msgpack value whose every
// length and count fits in b (each pending value takes at least a byte),
// without recursion or allocation. After it, what a decoder allocates for
// b is bounded by a small multiple of len(b).
func msgpackValid(b []byte) error {
	pending := 1
	for pending > 0 {
		head, n, isMap, err := msgpackHead(b)
		if err != nil {
			return err
		}
		b = b[head:]
		pending--
		if n > 0 {
			if n > len(b) {
				return fmt.Errorf("a collection declares %d entries, %d bytes remain", n, len(b))
			}
			if isMap {
				n *= 2
			}
			if n > len(b)-pending {
				return fmt.Errorf("a collection declares %d values, %d bytes remain", n, len(b))
			}
			pending += n
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after the value", len(b))
	}
	return nil
}

// msgpackHead decodes the head of the value at the start of b: for a map
// or array, the head's length and its number of entries or elements; for
// anything else, the whole value's length and n = -1.
func msgpackHead(b []byte) (head, n int, isMap bool, err error) {
	if len(b) == 0 {
		return 0, 0, false, fmt.Errorf("truncated value")
	}
	c := b[0]
	be := func(w int) (int, bool) { // a big-endian length; no slot holds 2 GiB
		if len(b) < 1+w {
			return 0, false
		}
		var v uint64
		for _, x := range b[1 : 1+w] {
			v = v<<8 | uint64(x)
		}
		return int(v), v <= math.MaxInt32
	}
	scalar := func(size int) (int, int, bool, error) {
		if size > len(b) || size < 0 {
			return 0, 0, false, fmt.Errorf("truncated value (code %#x)", c)
		}
		return size, -1, false, nil
	}
	sized := func(w, extra int) (int, int, bool, error) { // length word of w bytes, then extra, then data
		l, ok := be(w)
		if !ok {
			return 0, 0, false, fmt.Errorf("truncated or huge length (code %#x)", c)
		}
		return scalar(1 + w + extra + l)
	}
	coll := func(w int, m bool) (int, int, bool, error) {
		l, ok := be(w)
		if !ok {
			return 0, 0, false, fmt.Errorf("truncated or huge length (code %#x)", c)
		}
		return 1 + w, l, m, nil
	}
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return scalar(1)
	case c <= 0x8f:
		return 1, int(c & 0x0f), true, nil
	case c <= 0x9f:
		return 1, int(c & 0x0f), false, nil
	case c <= 0xbf:
		return scalar(1 + int(c&0x1f))
	}
	switch c {
	case 0xc4, 0xd9: // bin8, str8
		return sized(1, 0)
	case 0xc5, 0xda:
		return sized(2, 0)
	case 0xc6, 0xdb:
		return sized(4, 0)
	case 0xc7: // ext8: length, type, data
		return sized(1, 1)
	case 0xc8:
		return sized(2, 1)
	case 0xc9:
		return sized(4, 1)
	case 0xca, 0xce, 0xd2:
		return scalar(5)
	case 0xcb, 0xcf, 0xd3:
		return scalar(9)
	case 0xcc, 0xd0:
		return scalar(2)
	case 0xcd, 0xd1:
		return scalar(3)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16
		return scalar(2 + 1<<(c-0xd4))
	case 0xdc:
		return coll(2, false)
	case 0xdd:
		return coll(4, false)
	case 0xde:
		return coll(2, true)
	case 0xdf:
		return coll(4, true)
	}
	return 0, 0, false, fmt.Errorf("invalid code %#x", c)
}
