package platform

import "testing"

// TestPersistentWorkerPropertiesAreNotMatched: the persistent worker
// properties are requests to the worker and a routing hint, never labels
// a worker must declare.
func TestPersistentWorkerPropertiesAreNotMatched(t *testing.T) {
	props := Properties{{Name: PersistentWorkerKey, Value: "abc"}, {Name: PersistentWorkerProtocol, Value: "json"}, {Name: SupportsMultiplexWorkers, Value: "1"}}
	props.Sort()
	r, err := ParseRequest(props)
	if err != nil {
		t.Fatal(err)
	}
	w := Worker{Cores: 1, AllowUnmatched: false}
	if reasons := w.Accepts(r, nil); len(reasons) != 0 {
		t.Fatalf("a worker without unknown properties refuses: %v", reasons)
	}
}
