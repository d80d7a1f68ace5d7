package session

// Test-only exports.

// Ready reports whether Next would return an event without waiting.
func (r *Reader) Ready() bool {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.gen == r.s.gen && r.pos+1 < r.s.next
}
