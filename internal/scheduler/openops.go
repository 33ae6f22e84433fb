package scheduler

import (
	"slices"
	"sort"
)

// openOps holds the unfinished operations in the order the status pages
// show them: by their task's queuedAt, then by name. It is kept at submit,
// restore and finish (a requeue keeps queuedAt, so the order too), so a
// page costs O(blocks + openBlock + limit) under the scheduler's lock
// instead of a sort of every queued operation.
//
// The operations sit in sorted blocks of at most openBlock: an insertion
// or removal moves at most a block, and skipping to an offset steps over
// whole blocks.
type openOps struct {
	blocks [][]*Operation
	n      int
}

// openBlock bounds a block's length.
const openBlock = 512

// opBefore is the status pages' order.
func opBefore(a, b *Operation) bool {
	if qa, qb := a.task.queuedAt, b.task.queuedAt; !qa.Equal(qb) {
		return qa.Before(qb)
	}
	return a.Name < b.Name
}

// blockFor returns the index of the first block whose last operation is
// not before op (len(blocks) when there is none).
func (o *openOps) blockFor(op *Operation) int {
	return sort.Search(len(o.blocks), func(i int) bool {
		b := o.blocks[i]
		return !opBefore(b[len(b)-1], op)
	})
}

func (o *openOps) add(op *Operation) {
	o.n++
	i := o.blockFor(op)
	if i == len(o.blocks) {
		// After every operation: the usual case, as the clock advances.
		if i == 0 || len(o.blocks[i-1]) >= openBlock {
			o.blocks = append(o.blocks, make([]*Operation, 0, openBlock))
		} else {
			i--
		}
		o.blocks[i] = append(o.blocks[i], op)
		return
	}
	b := o.blocks[i]
	j := sort.Search(len(b), func(j int) bool { return !opBefore(b[j], op) })
	b = slices.Insert(b, j, op)
	if len(b) > openBlock {
		half := len(b) / 2
		right := make([]*Operation, len(b)-half, openBlock)
		copy(right, b[half:])
		clear(b[half:])
		b = b[:half]
		o.blocks = slices.Insert(o.blocks, i+1, right)
	}
	o.blocks[i] = b
}

// remove takes op out; an operation that is not there is ignored.
func (o *openOps) remove(op *Operation) {
	i := o.blockFor(op)
	if i == len(o.blocks) {
		return
	}
	b := o.blocks[i]
	j := sort.Search(len(b), func(j int) bool { return !opBefore(b[j], op) })
	if j == len(b) || b[j] != op {
		return
	}
	o.n--
	b = slices.Delete(b, j, j+1)
	switch {
	case len(b) == 0:
		o.blocks = slices.Delete(o.blocks, i, i+1)
		return
	case i+1 < len(o.blocks) && len(b)+len(o.blocks[i+1]) <= openBlock/2:
		// Two small neighbours become one, so sparse blocks do not pile up.
		b = append(b, o.blocks[i+1]...)
		o.blocks = slices.Delete(o.blocks, i+1, i+2)
	}
	o.blocks[i] = b
}

// page calls f on the operations from offset on, at most limit of them.
func (o *openOps) page(offset, limit int, f func(*Operation)) {
	if offset < 0 {
		offset = 0
	}
	for _, b := range o.blocks {
		if limit <= 0 {
			return
		}
		if offset >= len(b) {
			offset -= len(b)
			continue
		}
		for _, op := range b[offset:min(len(b), offset+limit)] {
			f(op)
			limit--
		}
		offset = 0
	}
}
