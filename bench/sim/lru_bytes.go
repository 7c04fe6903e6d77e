package sim

// LRUBytes is an exact least-recently-used cache under a budget in bytes:
// a new entry evicts from the least recent end until it fits; an entry
// larger than the whole budget is not admitted (a miss that changes
// nothing). An entry costs its key+value bytes (SizedTrace.Entry), no
// overhead. Not safe for concurrent use.
type LRUBytes struct {
	budget, used int64
	idx          map[uint32]*lruNode
	head, tail   *lruNode // head is the most recent
}

type lruNode struct {
	key        uint32
	bytes      int64
	prev, next *lruNode
}

// NewLRUBytes returns an empty LRUBytes of budget bytes.
func NewLRUBytes(budget int64) *LRUBytes {
	return &LRUBytes{budget: budget, idx: map[uint32]*lruNode{}}
}

// Used returns the bytes held.
func (c *LRUBytes) Used() int64 { return c.used }

// Len returns the entries held.
func (c *LRUBytes) Len() int { return len(c.idx) }

// Access implements SizedCache; it never fails.
func (c *LRUBytes) Access(k uint32, _, entry int) (bool, error) {
	if n, ok := c.idx[k]; ok {
		c.unlink(n)
		c.pushFront(n)
		return true, nil
	}
	b := int64(entry)
	if b > c.budget {
		return false, nil
	}
	for c.used+b > c.budget {
		t := c.tail
		c.unlink(t)
		delete(c.idx, t.key)
		c.used -= t.bytes
	}
	n := &lruNode{key: k, bytes: b}
	c.idx[k] = n
	c.pushFront(n)
	c.used += b
	return false, nil
}

func (c *LRUBytes) unlink(n *lruNode) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		c.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		c.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

func (c *LRUBytes) pushFront(n *lruNode) {
	n.next = c.head
	if c.head != nil {
		c.head.prev = n
	}
	c.head = n
	if c.tail == nil {
		c.tail = n
	}
}
