package scheduler

// PollRequest is a worker's ask for work (PollMany).
type PollRequest struct {
	WorkerID string
	// Free is what the worker has free now.
	Free Capacity
	// Limit is the most tasks to lease (below 1: 1).
	Limit int
}
