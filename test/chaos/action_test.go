package chaos

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

// kind is what an action does, and so what the client expects of it.
type kind string

const (
	kindOK        kind = "ok"        // writes out/out.txt: the hash of its inputs
	kindSlow      kind = "slow"      // the same after sleeping 1-4 s
	kindFail      kind = "fail"      // exits 3 on purpose, stderr says so
	kindLarge     kind = "large"     // also writes out/big.bin of 3 MiB
	kindCancel    kind = "cancel"    // sleeps 6 s; the client cancels it
	kindSandboxed kind = "sandboxed" // runs in bubblewrap (only w3 offers it)
	kindRepeat    kind = "repeat"    // an earlier successful action again: its cached result
)

// kindWeights is the mix of the load.
var kindWeights = []struct {
	k kind
	w int
}{{kindOK, 30}, {kindSlow, 15}, {kindFail, 10}, {kindLarge, 10}, {kindCancel, 8}, {kindSandboxed, 15}, {kindRepeat, 12}}

func pickKind(r *rand.Rand) kind {
	total := 0
	for _, kw := range kindWeights {
		total += kw.w
	}
	n := r.IntN(total)
	for _, kw := range kindWeights {
		if n < kw.w {
			return kw.k
		}
		n -= kw.w
	}
	return kindOK
}

const (
	// largeOutput is the size of out/big.bin (ByteStream, not a batch).
	largeOutput = 3<<20 + 11
	// failExit is the exit code of kindFail.
	failExit = 3
	// failMessage starts kindFail's stderr.
	failMessage = "failing on purpose"
	// sandboxUID is the uid sandboxed actions run as under a root worker.
	sandboxUID = "65534"
)

// actionScript is what every action runs (bash -c SCRIPT MARKER KEY FILES...):
// it reports its run to the test's run counter over TCP (which the
// sandboxed worker's actions reach too: their network is on), then does what
// its kind says. Its outputs are computable by the client.
const actionScript = `set -u
key=$1; shift
exec 3<>"/dev/tcp/127.0.0.1/$CHAOS_PORT" || exit 97
printf 'run %s %s\n' "$key" "$(id -u)" >&3
exec 3>&-
if [ "$CHAOS_SLEEP" != 0 ]; then sleep "$CHAOS_SLEEP"; fi
if [ "$CHAOS_FAIL" = 1 ]; then echo "` + failMessage + `: $key" >&2; exit 3; fi
mkdir -p out
h=$(cat "$@" | sha256sum | cut -d' ' -f1)
printf '%s\n' "$h" > out/out.txt
if [ "$CHAOS_BIG" != 0 ]; then yes "$h" | head -c "$CHAOS_BIG" > out/big.bin; fi
echo "done $key"
`

// action is one action of the load, with everything the client needs to
// check its answers.
type action struct {
	key      string
	kind     kind
	instance string
	request  *repb.ExecuteRequest
	digest   digest.Digest
	blobs    map[digest.Digest][]byte // input root, Command, Action
	want     map[string][]byte        // output path -> content (ok kinds)
}

// sharedInputs are files several actions hold (the same digests).
var sharedInputs = func() [][]byte {
	var out [][]byte
	for i := 0; i < 4; i++ {
		out = append(out, []byte(fmt.Sprintf("shared input %d\n", i)))
	}
	// One larger than a batch, so inputs go up and come down by ByteStream.
	big := bytes.Repeat([]byte("a shared input larger than a batch\n"), (5<<20)/35)
	return append(out, big)
}()

// actionEnv is what every action's environment holds besides its kind's values.
type actionEnv struct {
	bash   string
	marker string // the run's mark: argv[0] of every action, CHAOS_RUN
	port   int    // the run counter's port
}

// newAction builds a fresh action of kind k (not kindRepeat) numbered n.
func newAction(r *rand.Rand, env actionEnv, k kind, n int, instance string) *action {
	a := &action{key: fmt.Sprintf("a%05d-%s", n, k), kind: k, instance: instance, blobs: map[digest.Digest][]byte{}}
	files := map[string][]byte{
		"counter.txt": []byte(fmt.Sprintf("%d\n", n)),
		"data.txt":    []byte(fmt.Sprintf("data of %s: %x\n", a.key, r.Uint64())),
	}
	for i := 0; i < 2; i++ {
		j := r.IntN(len(sharedInputs))
		if j == len(sharedInputs)-1 && r.IntN(4) != 0 {
			continue // the large one in about one action in ten
		}
		files[fmt.Sprintf("shared-%d.txt", j)] = sharedInputs[j]
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)

	root := &repb.Directory{}
	var concat []byte
	for _, name := range names {
		d := a.put(files[name])
		root.Files = append(root.Files, &repb.FileNode{Name: name, Digest: d.Proto()})
		concat = append(concat, files[name]...)
	}
	sum := sha256.Sum256(concat)
	h := hex.EncodeToString(sum[:])

	sleep, fail, big := "0", "0", 0
	switch k {
	case kindSlow:
		sleep = strconv.Itoa(1 + r.IntN(4))
	case kindCancel:
		sleep = "6"
	case kindFail:
		fail = "1"
	case kindLarge:
		big = largeOutput
	}
	a.want = map[string][]byte{"out/out.txt": []byte(h + "\n")}
	if big > 0 {
		a.want["out/big.bin"] = repeatLine(h, big)
	}
	var platform *repb.Platform
	if k == kindSandboxed {
		platform = &repb.Platform{Properties: []*repb.Platform_Property{{Name: "process-wrapper", Value: "bubblewrap"}}}
	}
	cmd := &repb.Command{
		Arguments: append([]string{env.bash, "-c", actionScript, env.marker, a.key}, names...),
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{
			{Name: "CHAOS_BIG", Value: strconv.Itoa(big)},
			{Name: "CHAOS_FAIL", Value: fail},
			{Name: "CHAOS_PORT", Value: strconv.Itoa(env.port)},
			{Name: "CHAOS_RUN", Value: env.marker},
			{Name: "CHAOS_SLEEP", Value: sleep},
			{Name: "PATH", Value: "/usr/local/bin:/usr/bin:/bin"},
		},
		OutputPaths: []string{"out/big.bin", "out/out.txt"},
		Platform:    platform,
	}
	act := &repb.Action{
		CommandDigest:   a.put(mustMarshal(cmd)).Proto(),
		InputRootDigest: a.put(mustMarshal(root)).Proto(),
		Platform:        platform,
	}
	a.digest = a.put(mustMarshal(act))
	a.request = &repb.ExecuteRequest{InstanceName: instance, ActionDigest: a.digest.Proto(), DigestFunction: repb.DigestFunction_SHA256}
	return a
}

func (a *action) put(b []byte) digest.Digest {
	d := digest.Compute(digest.SHA256, b)
	a.blobs[d] = b
	return d
}

// repeatLine is what `yes LINE | head -c n` writes.
func repeatLine(line string, n int) []byte {
	one := []byte(line + "\n")
	out := bytes.Repeat(one, n/len(one)+1)
	return out[:n]
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// outcome is what became of one submission of an action, as the client saw it.
type outcome struct {
	a         *action
	repeatOf  *outcome // kindRepeat: the earlier successful submission
	start     time.Time
	end       time.Time
	names     []string // every operation name the server gave
	retries   int      // submissions after the first (transient errors)
	retryWhy  []string
	final     string // succeeded, failed-as-expected, cancelled, lost
	result    *repb.ActionResult
	cancelled bool // the client sent CancelOperation
	// cachedName is the operation that answered from the ActionCache.
	cachedName string
	// doneName is the operation whose done message the client last got.
	doneName string
	// notCached: the successful answer said its result could not be
	// cached (the ActionCache write failed past its retries).
	notCached bool
}
