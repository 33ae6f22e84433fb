package history

import "container/heap"

// buildAges orders the builds by the end of their last operation, oldest
// first (a heap), so that pruning finds the oldest without looking at
// every build on every record.
type buildAges struct {
	heap []*Build
	pos  map[*Build]int
}

func newBuildAges() *buildAges { return &buildAges{pos: map[*Build]int{}} }

func (a *buildAges) Len() int           { return len(a.heap) }
func (a *buildAges) Less(i, j int) bool { return a.heap[i].Last.Before(a.heap[j].Last) }
func (a *buildAges) Swap(i, j int) {
	a.heap[i], a.heap[j] = a.heap[j], a.heap[i]
	a.pos[a.heap[i]], a.pos[a.heap[j]] = i, j
}
func (a *buildAges) Push(x any) {
	b := x.(*Build)
	a.pos[b] = len(a.heap)
	a.heap = append(a.heap, b)
}
func (a *buildAges) Pop() any {
	b := a.heap[len(a.heap)-1]
	a.heap[len(a.heap)-1] = nil
	a.heap = a.heap[:len(a.heap)-1]
	delete(a.pos, b)
	return b
}

// add starts tracking b.
func (a *buildAges) add(b *Build) { heap.Push(a, b) }

// changed puts b back in order after its Last moved.
func (a *buildAges) changed(b *Build) {
	if i, ok := a.pos[b]; ok {
		heap.Fix(a, i)
	}
}

// remove stops tracking b.
func (a *buildAges) remove(b *Build) {
	if i, ok := a.pos[b]; ok {
		heap.Remove(a, i)
	}
}

// oldest is the build whose last operation ended first (nil: none).
func (a *buildAges) oldest() *Build {
	if len(a.heap) == 0 {
		return nil
	}
	return a.heap[0]
}
