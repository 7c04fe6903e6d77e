package shmarena

import (
	"encoding/binary"
	"testing"
)

// benchRoute is a small struct: a short string and two integers.
type benchRoute struct {
	Upstream string `msgpack:"upstream"`
	Weight   int64  `msgpack:"weight"`
	Port     uint16 `msgpack:"port"`
}

var benchRouteValue = benchRoute{Upstream: "10.0.0.1", Weight: 3, Port: 8080}

// The hand-coded baseline a user would write without TypedMap: fixed
// little-endian fields, then the string.
func appendRoute(b []byte, r benchRoute) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Weight))
	b = binary.LittleEndian.AppendUint16(b, r.Port)
	return append(b, r.Upstream...)
}

func parseRoute(b []byte) (benchRoute, bool) {
	if len(b) < 10 {
		return benchRoute{}, false
	}
	return benchRoute{
		Weight:   int64(binary.LittleEndian.Uint64(b)),
		Port:     binary.LittleEndian.Uint16(b[8:]),
		Upstream: string(b[10:]),
	}, true
}

func BenchmarkCodecStore(b *testing.B) {
	b.Run("typed", func(b *testing.B) {
		m := testTyped[benchRoute](b, WithSlots(1024))
		b.ReportAllocs()
		for b.Loop() {
			if err := m.Store("example.org", benchRouteValue); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bytes-by-hand", func(b *testing.B) {
		m := testMap(b, WithSlots(1024))
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf = appendRoute(buf[:0], benchRouteValue)
			if err := m.Store("example.org", buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkCodecLoad(b *testing.B) {
	b.Run("typed", func(b *testing.B) {
		m := testTyped[benchRoute](b, WithSlots(1024))
		if err := m.Store("example.org", benchRouteValue); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			r, ok, err := m.Load("example.org")
			if err != nil || !ok || r.Port != 8080 {
				b.Fatal(r, ok, err)
			}
		}
	})
	b.Run("bytes-by-hand", func(b *testing.B) {
		m := testMap(b, WithSlots(1024))
		if err := m.Store("example.org", appendRoute(nil, benchRouteValue)); err != nil {
			b.Fatal(err)
		}
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			var ok bool
			buf, ok = m.AppendLoad(buf[:0], "example.org")
			r, ok2 := parseRoute(buf)
			if !ok || !ok2 || r.Port != 8080 {
				b.Fatal(r, ok)
			}
		}
	})
}

// BenchmarkCodecUpdate is a read-modify-write of the same small struct:
// Update decodes, runs fn and encodes under the stripe lock.
func BenchmarkCodecUpdate(b *testing.B) {
	m := testTyped[benchRoute](b, WithSlots(1024))
	if err := m.Store("example.org", benchRouteValue); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Update("example.org", func(old benchRoute, ok bool) (benchRoute, bool) {
			old.Weight++
			return old, true
		}); err != nil {
			b.Fatal(err)
		}
	}
}
