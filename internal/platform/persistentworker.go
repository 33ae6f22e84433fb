package platform

// Platform properties of remote persistent workers. Bazel 6+ with
// --experimental_remote_mark_tool_inputs sets persistentWorkerKey (a hash
// of the tool inputs) and, from Bazel 8, persistentWorkerProtocol (json or
// proto, from requires-worker-protocol); supports-multiplex-workers is
// the execution requirement's name, which a rule passes through
// exec_properties. They ask the worker how to run an action, and the
// scheduler reads the key as a routing hint: none of them is a label
// to match (IsSpecial).
const (
	PersistentWorkerKey      = "persistentWorkerKey"
	PersistentWorkerProtocol = "persistentWorkerProtocol"
	SupportsMultiplexWorkers = "supports-multiplex-workers"
)

// isPersistentWorker reports whether name is one of them.
func isPersistentWorker(name string) bool {
	switch name {
	case PersistentWorkerKey, PersistentWorkerProtocol, SupportsMultiplexWorkers:
		return true
	}
	return false
}
