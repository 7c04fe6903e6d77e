package sim

// A Cache answers one request at a time: Access reports whether key was
// cached and, when it was not, admits it (evicting as its policy says).
type Cache interface {
	Access(key uint32) (hit bool, err error)
}

// LRU is an exact least-recently-used cache of a fixed number of entries:
// a doubly linked list over a node array plus a Go map from key to node.
// Not safe for concurrent use.
type LRU struct {
	cap        int
	idx        map[uint32]int32
	key        []uint32
	prev, next []int32 // node links; head is the most recent
	head, tail int32
}

// NewLRU returns an empty LRU cache holding at most capacity (>= 1)
// entries.
func NewLRU(capacity int) *LRU {
	capacity = max(1, capacity)
	return &LRU{cap: capacity, idx: make(map[uint32]int32, capacity),
		key: make([]uint32, 0, capacity), prev: make([]int32, 0, capacity), next: make([]int32, 0, capacity),
		head: -1, tail: -1}
}

// Len returns how many entries the cache holds.
func (c *LRU) Len() int { return len(c.idx) }

// Access implements Cache; it never fails.
func (c *LRU) Access(k uint32) (bool, error) {
	if n, ok := c.idx[k]; ok {
		c.unlink(n)
		c.pushFront(n)
		return true, nil
	}
	var n int32
	if len(c.key) < c.cap {
		n = int32(len(c.key))
		c.key = append(c.key, k)
		c.prev = append(c.prev, -1)
		c.next = append(c.next, -1)
	} else {
		n = c.tail
		delete(c.idx, c.key[n])
		c.unlink(n)
		c.key[n] = k
	}
	c.idx[k] = n
	c.pushFront(n)
	return false, nil
}

func (c *LRU) unlink(n int32) {
	p, x := c.prev[n], c.next[n]
	if p >= 0 {
		c.next[p] = x
	} else {
		c.head = x
	}
	if x >= 0 {
		c.prev[x] = p
	} else {
		c.tail = p
	}
}

func (c *LRU) pushFront(n int32) {
	c.prev[n], c.next[n] = -1, c.head
	if c.head >= 0 {
		c.prev[c.head] = n
	}
	c.head = n
	if c.tail < 0 {
		c.tail = n
	}
}
