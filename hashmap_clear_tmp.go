package shmarena

// TEMPORARY: replaced by issue 13's Clear

// Clear deletes every key of the map and returns how many it deleted.
// Keys written while it runs may survive. Errors: ErrReadOnly on a
// read-only handle; ErrClosed after Close. Safe for concurrent use.
func (m *Map) Clear() (int, error) {
	if err := m.refuse("clear"); err != nil {
		return 0, err
	}
	if m.a.closed.Load() {
		return 0, ErrClosed
	}
	n := 0
	for k := range m.Keys() {
		if m.Delete(k) {
			n++
		}
	}
	return n, nil
}
