package shmarena

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Append forms keep what dst holds, reuse its spare elements' memory
// for the new records, and never let two records share bytes, whatever
// the sizes of the payloads before and after.
func TestAppendClaimReusesSpareMemory(t *testing.T) {
	a, _ := openTestArena(t, 8<<20)
	r, err := a.Ring("append", WithSlots(256), WithSlotSize(256), WithMaxInFlight(128))
	require.NoError(t, err)
	once, err := r.Group("once")
	require.NoError(t, err)
	acked, err := r.Group("acked", WithAck(time.Minute))
	require.NoError(t, err)
	c := r.Cursor()

	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 1+(i*37)%200) }
	topic := func(i int) string { return fmt.Sprintf("t%d", i%3) }
	readers := map[string]func([]Record, int) []Record{
		"Group":        once.AppendClaim,
		"acking Group": acked.AppendClaim,
		"Cursor":       c.AppendRead,
	}
	kept := Record{Topic: "kept", Payload: []byte("kept"), Seq: 99}
	bufs := map[string][]Record{}
	next := 0
	for round := range 6 {
		n := 1 + round*5 // batches of growing size, then smaller payloads
		first := next
		for range n {
			_, err := r.Publish(topic(next), payload(next))
			require.NoError(t, err)
			next++
		}
		for name, read := range readers {
			recs := read(append(bufs[name][:0], kept), n)
			require.Len(t, recs, n+1, name)
			assert.Equal(t, kept, recs[0], name)
			for i, rec := range recs[1:] {
				assert.Equal(t, uint64(first+i+1), rec.Seq, name)
				assert.Equal(t, topic(first+i), rec.Topic, name)
				assert.Equal(t, payload(first+i), rec.Payload, name)
			}
			if name == "acking Group" {
				require.NoError(t, acked.Ack(recs[1:]...))
			}
			bufs[name] = recs
		}
	}
	// Writing every payload to its full capacity, each with its own byte,
	// touches no other record.
	for name, recs := range bufs {
		for i, rec := range recs[1:] {
			p := rec.Payload[:cap(rec.Payload)]
			for j := range p {
				p[j] = byte(i + 1)
			}
		}
		for i, rec := range recs[1:] {
			assert.Equal(t, bytes.Repeat([]byte{byte(i + 1)}, len(rec.Payload)), rec.Payload, name)
		}
	}
}

// Nothing to claim returns dst as it was, not nil.
func TestAppendClaimNothingReturnsDst(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	r, err := a.Ring("append", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	g, err := r.Group("g")
	require.NoError(t, err)
	dst := []Record{{Seq: 7}}
	assert.Equal(t, dst, g.AppendClaim(dst, 4))
	assert.Equal(t, dst, r.Cursor().AppendRead(dst, 4))
	assert.Nil(t, g.Claim(4))
}
