package scheduler

import (
	"container/list"
	"strconv"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/platform"
)

// Deriving a shape key decodes the Command and normalises every
// argument: tens of microseconds for a compile of a hundred arguments,
// on every Submit. The same Command comes back often (a rebuild changes
// the inputs, not the command line; every test run of a target repeats
// its command), so the keys are kept by what they are derived from, with
// the Command named by its digest, in a bounded LRU.

// shapeKeyCacheSize bounds the keys kept: at most some 5 MiB (an entry
// is its sources, the key and its label: a few hundred bytes).
const shapeKeyCacheSize = 8192

// shapeKeyCache is safe for concurrent use; its zero value is empty and
// ready (Submit derives shapes outside the scheduler's lock).
type shapeKeyCache struct {
	mu   sync.Mutex
	keys map[shapeSource]*list.Element // of *shapeCached
	lru  list.List                     // front: most recently used
}

// shapeSource is what a shape key is derived from.
type shapeSource struct {
	instance, platform, mnemonic string
	// command is the Command's digest (hash/size).
	command string
}

type shapeCached struct {
	src shapeSource
	key shapeKey
}

// derive is deriveShape(instance, props, cmd, mnemonic), from the cache
// when the Command's digest cd is known (nil: derived every time).
func (c *shapeKeyCache) derive(instance string, props platform.Properties, cmd []byte, cd *repb.Digest, mnemonic string) shapeKey {
	if cd.GetHash() == "" {
		return deriveShape(instance, props, cmd, mnemonic)
	}
	src := shapeSource{instance: instance, platform: props.Key(), mnemonic: mnemonic, command: cd.GetHash() + "/" + strconv.FormatInt(cd.GetSizeBytes(), 10)}
	c.mu.Lock()
	if e, ok := c.keys[src]; ok {
		c.lru.MoveToFront(e)
		k := e.Value.(*shapeCached).key
		c.mu.Unlock()
		return k
	}
	c.mu.Unlock()
	k := deriveShape(instance, props, cmd, mnemonic)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[shapeSource]*list.Element{}
	}
	if _, ok := c.keys[src]; !ok {
		c.keys[src] = c.lru.PushFront(&shapeCached{src: src, key: k})
		for c.lru.Len() > shapeKeyCacheSize {
			delete(c.keys, c.lru.Remove(c.lru.Back()).(*shapeCached).src)
		}
	}
	return k
}

// len is the number of keys kept.
func (c *shapeKeyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
