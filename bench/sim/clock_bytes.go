package sim

// ClockBytes models the evicting map's eviction by bytes (the core's
// evictBytes in hashmap_values_room.go): one log of entries in the order
// they were written, reclaimed at its head. A read counts up to 3; the
// head's entry goes round again (to the tail, its count less one) if it
// was read since it last came round, else it is evicted: a CLOCK with a
// 2-bit counter over the bytes, which gives a new key a whole lap of the
// log to be read, where S3-FIFO gives it a tenth. It leaves out what the
// map adds (its segments, each with its own log; the bound on the bytes
// one write moves; record headers): a model to attribute the map's gap to
// S3-FIFO, not a reference. An entry costs its key+value bytes; one
// larger than the budget is not admitted. Not safe for concurrent use.
type ClockBytes struct {
	// MoveNeedsRoom evicts the head's entry, read or not, when the free
	// bytes are fewer than its own, as the map does (it copies the record
	// to the tail before it frees the original).
	MoveNeedsRoom bool
	budget, used  int64
	log           keyQueue
	obj           map[uint32]s3obj
}

// NewClockBytes returns an empty ClockBytes of budget bytes.
func NewClockBytes(budget int64) *ClockBytes {
	return &ClockBytes{budget: budget, obj: map[uint32]s3obj{}}
}

// Access implements SizedCache; it never fails.
func (c *ClockBytes) Access(k uint32, _, entry int) (bool, error) {
	if o, ok := c.obj[k]; ok {
		o.freq = min(o.freq+1, 3)
		c.obj[k] = o
		return true, nil
	}
	b := int64(entry)
	if b > c.budget {
		return false, nil
	}
	for c.used+b > c.budget {
		h := c.log.pop()
		o := c.obj[h]
		if o.freq > 0 && (!c.MoveNeedsRoom || c.budget-c.used >= o.bytes) {
			o.freq--
			c.obj[h] = o
			c.log.push(h)
			continue
		}
		delete(c.obj, h)
		c.used -= o.bytes
	}
	c.log.push(k)
	c.obj[k] = s3obj{bytes: b}
	c.used += b
	return false, nil
}
