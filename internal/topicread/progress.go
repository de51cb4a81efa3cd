package topicread

// progress is what a Follower still has to read to catch up: the end
// offset of each partition that has records before it. It has no lock: a
// Follower is for one goroutine.
type progress map[int32]int64

// newProgress keeps the partitions of s.Ends whose end is past their
// s.From: the others have nothing to read up to their end.
func newProgress(s Start) progress {
	p := progress{}
	for part, end := range s.Ends {
		if from, ok := s.From[part]; ok && end > from {
			p[part] = end
		}
	}
	return p
}

// end is the end offset part still has to reach; ok is false once it
// reached it, or when it had none.
func (p progress) end(part int32) (end int64, ok bool) {
	end, ok = p[part]
	return end, ok
}

// advance notes that nothing before next is left to read in part (the
// record before it was returned, or everything before it is gone), and
// reports whether part reached its end just now.
func (p progress) advance(part int32, next int64) (reached bool) {
	if end, ok := p[part]; ok && next >= end {
		delete(p, part)
		return true
	}
	return false
}
