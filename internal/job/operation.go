package job

import "sync"

// Operation remembers the name of the remote operation a job started (the
// started callback of remote.Client.Execute and Run), so that another
// goroutine, on Ctrl-C, can cancel it. The zero value is ready to use.
type Operation struct {
	mu   sync.Mutex
	name string
}

// Started records the operation's name; it is the started callback.
func (o *Operation) Started(name string) {
	o.mu.Lock()
	o.name = name
	o.mu.Unlock()
}

// Name is the operation's name, "" before the server started one.
func (o *Operation) Name() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.name
}
