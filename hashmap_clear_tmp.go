package shmarena

// TEMPORARY: replaced by issue 13's Clear

// Clear deletes every key of the map. Keys written while it runs may
// survive. Errors: ErrReadOnly on a
// read-only handle; ErrClosed after Close. Safe for concurrent use.
func (m *Map) Clear() error {
	if err := m.refuse("clear"); err != nil {
		return err
	}
	if m.a.closed.Load() {
		return ErrClosed
	}
	for k := range m.Keys() {
		m.Delete(k)
	}
	return nil
}
