package execution

// onFreshStack runs f on a goroutine of its own and returns its result.
//
// An Execute call's goroutine stays parked in follow for as long as its
// operation is queued: with 100,000 queued, 100,000 of them. Its stack is
// sized by the deepest point it ever reached, and the runtime halves a
// parked stack only while less than a quarter of it is in use; the CAS
// reads, proto decoding and validation of an action's admission go deep
// enough to double it (8 to 16 KiB), and follow's frames then keep it
// there. Run on a short-lived goroutine, that depth is given back when
// the admission ends, and the parked stack keeps its first size.
func onFreshStack[T any](f func() T) T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return <-ch
}
