package shmarena

import (
	"fmt"
	"slices"

	"github.com/shmarena/shmarena/internal/mem"
)

// This file: rebuilding and checking a segment's value space from its
// slots. The slots are the truth: a live slot names its record's offset
// and (by its value length) size, so the log's headers, its live bytes
// and its tail can all be written again from them, whatever a crash in an
// allocation, a move or a compaction left between the records.

// An owned record is a live slot's record, as the slots tell it.
type owned struct {
	slot, h  uint64
	rel      uint64 // offset from the head, in log order
	size     uint64
	at       uint64 // offset in the share
	position uint64
}

// scanValues lists segment s's live records in log order, and the slots
// whose references make no sense (out of bounds, outside the log's held
// window, overlapping another record): those hold values that cannot be
// read back and must go.
func (m *Map) scanValues(s uint64) (good []owned, bad []uint64) {
	head, tail := m.vsWord(s, vsHead), m.vsWord(s, vsTail)
	sane := tail >= head && tail-head <= m.vs.share
	sp := m.span(s)
	for i := sp.lo; i < sp.hi; i++ {
		off := m.slotOff(i)
		meta := mem.Load64(m.mem, off+sMeta)
		if metaState(meta) != stateLive || metaFlags(meta)&flagExternal == 0 {
			continue
		}
		vlen := metaValLen(meta)
		rs, at, ok := m.refOf(mem.Load64(m.mem, off+sData), vlen)
		size := recordSize(vlen)
		rel := (at + m.vs.share - head%m.vs.share) % m.vs.share
		if !sane || !ok || !m.validExternal(meta) || rs != s || rel+size > tail-head {
			bad = append(bad, i)
			continue
		}
		good = append(good, owned{slot: i, h: mem.Load64(m.mem, off+sHash), rel: rel, size: size, at: at, position: head + rel})
	}
	slices.SortFunc(good, func(a, b owned) int { return compareU64(a.rel, b.rel) })
	kept := good[:0]
	end := uint64(0)
	for _, o := range good {
		if o.rel < end {
			bad = append(bad, o.slot)
			continue
		}
		kept = append(kept, o)
		end = o.rel + o.size
	}
	return kept, bad
}

func compareU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rewriteLog writes segment s's record headers from good (scanValues'
// list, which holds every live record), padding between them, and sets
// the live bytes and the tail (just past the last live record).
func (m *Map) rewriteLog(s uint64, good []owned) {
	head, tail := m.vsWord(s, vsHead), m.vsWord(s, vsTail)
	if tail < head || tail-head > m.vs.share {
		head = tail // no record survived scanValues
		m.vsPut(s, vsHead, head)
	}
	var cursor, live uint64
	for _, o := range good {
		if o.rel > cursor {
			m.putRecordHeader(s, head+cursor, o.rel-cursor, padHint, 0)
		}
		m.putRecordHeader(s, o.position, o.size, o.slot, o.h)
		cursor = o.rel + o.size
		live += o.size
	}
	m.vsPut(s, vsTail, head+cursor)
	m.vsPut(s, vsLive, live)
}

// rebuildValues rebuilds segment s's value space from its slots, holding
// its lock, removing the entries whose references make no sense (only a
// damaged file has them).
func (m *Map) rebuildValues(s uint64) error {
	sp := m.span(s)
	for range sp.len() + 1 {
		good, bad := m.scanValues(s)
		if len(bad) == 0 {
			m.rewriteLog(s, good)
			return nil
		}
		off := m.slotOff(bad[0]) // a removal moves entries: look again
		v := view{off: off, ver: mem.Load64(m.mem, off+sVersion), meta: mem.Load64(m.mem, off+sMeta)}
		if !m.remove(s, v) {
			return m.errLockLost(s)
		}
	}
	return m.errValueSpace(s, "could not be rebuilt")
}

// repairValues is repairSegment's part for the value space: entries whose
// references make no sense become tombstones and the slots are reseated
// again, then the log is rebuilt.
func (m *Map) repairValues(s uint64, sp span) {
	if m.vs.share == 0 {
		return
	}
	for range 2 {
		good, bad := m.scanValues(s)
		if len(bad) == 0 {
			m.rewriteLog(s, good)
			return
		}
		for _, i := range bad {
			m.clearAt(s, i, stateTombstone)
		}
		m.reseat(s, sp)
		m.recountSegment(s, sp)
	}
	m.rewriteLog(s, nil) // unreachable: the second scan finds nothing bad
}

// moveHint follows an entry that a delete moves from slot j to slot to:
// its record's header names its owner.
func (m *Map) moveHint(s, to uint64, meta, ref uint64) {
	if metaFlags(meta)&flagExternal == 0 {
		return
	}
	rs, at, ok := m.refOf(ref, metaValLen(meta))
	if !ok || rs != s {
		return
	}
	o := m.vsOff(s) + vsHeader + int(at)
	w := mem.Load64(m.mem, o)
	mem.Put64(m.mem, o, w&(1<<32-1)|to<<32)
}

// checkValues checks segment s's value space against its slots, for
// Check: the log's records from head to tail parse, every live slot's
// reference names a record of its size that names the slot back, and the
// live bytes are the sum of those records. A writer at work changes all of
// these, so every finding is soft (reported from a still read).
func (m *Map) checkValues(s uint64, soft *[]string) {
	if m.vs.share == 0 {
		return
	}
	add := func(f string, a ...any) {
		*soft = append(*soft, fmt.Sprintf("segment %d: value space: ", s)+fmt.Sprintf(f, a...))
	}
	head, tail, live := m.vsWord(s, vsHead), m.vsWord(s, vsTail), m.vsWord(s, vsLive)
	if tail < head || tail-head > m.vs.share {
		add("head %d and tail %d hold more than its %d bytes", head, tail, m.vs.share)
		return
	}
	starts := make(map[uint64][2]uint64) // offset -> size, owner hint
	for p := head; p < tail; {
		size, hint, _ := m.recordHeader(s, p)
		if size < recHeader || size&15 != 0 || size > tail-p {
			add("record at log position %d has size %d (the log holds %d bytes from there)", p, size, tail-p)
			return
		}
		starts[p%m.vs.share] = [2]uint64{size, hint}
		p += size
	}
	var sum uint64
	sp := m.span(s)
	for i := sp.lo; i < sp.hi; i++ {
		off := m.slotOff(i)
		meta := mem.Load64(m.mem, off+sMeta)
		if metaState(meta) != stateLive || metaFlags(meta)&flagExternal == 0 {
			continue
		}
		size := recordSize(metaValLen(meta))
		rs, at, ok := m.refOf(mem.Load64(m.mem, off+sData), metaValLen(meta))
		rec, found := starts[at]
		switch {
		case !ok || rs != s:
			add("slot %d: reference %#x out of bounds", i, mem.Load64(m.mem, off+sData))
		case !found:
			add("slot %d: no record starts at offset %d, where it points", i, at)
		case rec[0] != size:
			add("slot %d: its record at %d is %d bytes, its value needs %d", i, at, rec[0], size)
		case rec[1] != i:
			add("slot %d: its record at %d names slot %d", i, at, rec[1])
		default:
			sum += size
		}
	}
	if sum != live {
		add("counts %d live bytes, the slots' records hold %d", live, sum)
	}
}
