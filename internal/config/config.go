// Package config defines Gantry's one YAML configuration file, its defaults
// and its validation. Every error names the key's path.
package config

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gantry-build/gantry/internal/invocation"
)

// Config is the whole configuration. docs/CONFIGURATION.md documents every key.
type Config struct {
	// Listen is the gRPC address for REAPI clients and workers.
	Listen string `yaml:"listen"`
	// HTTPListen serves /metrics and /healthz.
	HTTPListen string `yaml:"http_listen"`
	// DataDir holds the stores' files.
	DataDir   string          `yaml:"data_dir"`
	Storage   Storage         `yaml:"storage"`
	Scheduler SchedulerConfig `yaml:"scheduler"`
	Worker    WorkerConfig    `yaml:"worker"`
	GRPC      GRPC            `yaml:"grpc"`
	Log       LogConfig       `yaml:"log"`
	Status    StatusConfig    `yaml:"status"`
	// TLS and Auth secure the ports (docs/OPERATIONS.md, "Security").
	TLS  TLSConfig  `yaml:"tls"`
	Auth AuthConfig `yaml:"auth"`
	// Client is how `gantry worker` connects to the server.
	Client ClientConfig `yaml:"client"`
	// Role and Cluster: see cluster.go.
	Role    string        `yaml:"role"`
	Cluster ClusterConfig `yaml:"cluster"`
	Metrics MetricsConfig `yaml:"metrics"`
	Tracing TracingConfig `yaml:"tracing"`
	// RemoteAsset: see remoteasset.go.
	RemoteAsset RemoteAssetConfig `yaml:"remote_asset"`
}

// SchedulerConfig tunes the scheduler.
type SchedulerConfig struct {
	// HeartbeatInterval is how often workers must heartbeat.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// HeartbeatTimeout is how long a worker may stay silent before its
	// actions go back to the queue.
	HeartbeatTimeout Duration `yaml:"heartbeat_timeout"`
	// ReconcileWindow is how long, after a restart that was not clean
	// (a kill, a crash, a fail-over), the restored queued actions wait for
	// the workers to report the leases they were handed before those were
	// stored.
	ReconcileWindow Duration `yaml:"reconcile_window"`
	// MaxAttempts bounds how often an action is handed out after lost
	// workers before it fails with UNAVAILABLE.
	MaxAttempts int `yaml:"max_attempts"`
	// CallerGrace is how long an action runs on after every client waiting
	// for it went away.
	CallerGrace Duration `yaml:"caller_grace"`
	// Retention is how long finished operations stay queryable.
	Retention Duration `yaml:"retention"`
	// Queues are the provision queues, in matching order.
	Queues []QueueConfig `yaml:"queues"`
	// IgnoredProperties are platform property names dropped from every
	// action before matching (e.g. container-image, which no worker
	// honours unless it declares it).
	IgnoredProperties []string `yaml:"ignored_properties"`
	// UnsatisfiableWait is how long an action no worker could ever run
	// stays queued before it fails with an explanation.
	UnsatisfiableWait Duration `yaml:"unsatisfiable_wait"`
	// StartupGrace delays that verdict after a start.
	StartupGrace Duration `yaml:"startup_grace"`
	// Fairness shares each queue between the parties submitting work.
	Fairness FairnessConfig `yaml:"fairness"`
	// Labels name sets of platform properties; Cohorts group workers by
	// their labels, for quotas (docs/CONFIGURATION.md, "Tenancy").
	Labels  []LabelConfig  `yaml:"labels"`
	Cohorts []CohortConfig `yaml:"cohorts"`
	// PreemptionDelay is how long an instance below its min quota waits
	// for a free slot before running work is pre-empted for it.
	PreemptionDelay Duration `yaml:"preemption_delay"`
	// Preemption is how a victim is pre-empted: "cancel" (its work is
	// lost and it is queued again) or "suspend" (SIGSTOP, memory kept,
	// resumed later).
	Preemption string `yaml:"preemption"`
	// MaxSuspend is how long a suspended victim may stay stopped before it
	// is cancelled and queued again, as in cancel mode.
	MaxSuspend Duration `yaml:"max_suspend"`
	// Store is where the scheduler's state is kept durably.
	Store StoreConfig `yaml:"store"`
	// ChrootInstances are the instances whose actions run with their
	// input root as "/" on workers in sandbox mode chroot (chroot.go).
	ChrootInstances []string `yaml:"chroot_instances"`
	// LiveOutput bounds the live output of running actions (liveoutput.go).
	LiveOutput LiveOutputConfig `yaml:"live_output"`
	// Durations bounds the history of action durations the scheduler
	// learns from.
	Durations DurationsConfig `yaml:"durations"`
	// Autoscaling tunes the workers-needed signal.
	Autoscaling AutoscalingConfig `yaml:"autoscaling"`
	// SizeClasses place actions on classes of workers by size
	// (sizeclasses.go).
	SizeClasses SizeClassesConfig `yaml:"size_classes"`
}

// AutoscalingConfig tunes the scheduler's autoscaling signal.
type AutoscalingConfig struct {
	// TargetDrain is the time the signal sizes the workers for.
	TargetDrain Duration `yaml:"target_drain"`
}

// DurationsConfig bounds the scheduler's duration history per action
// shape (docs/CONFIGURATION.md).
type DurationsConfig struct {
	// MaxShapes bounds the shapes kept; 0 learns nothing.
	MaxShapes int `yaml:"max_shapes"`
	// HalfLife is how long until a sample counts half.
	HalfLife Duration `yaml:"half_life"`
	// TimeoutMultiple, TimeoutFloor and TimeoutMinSamples make learned
	// timeouts: min(client's, max(floor, multiple x expected)) for a
	// shape with at least min_samples runs; multiple 0 turns them off.
	TimeoutMultiple   float64  `yaml:"timeout_multiple"`
	TimeoutFloor      Duration `yaml:"timeout_floor"`
	TimeoutMinSamples float64  `yaml:"timeout_min_samples"`
}

// StoreConfig selects the scheduler's state store.
type StoreConfig struct {
	// Backend is embedded (files under data_dir/scheduler/state),
	// postgres, or memory (nothing survives a restart).
	Backend string `yaml:"backend"`
	// DSN is the PostgreSQL connection string for the postgres backend,
	// e.g. postgres://gantry@db.example:5432/gantry?sslmode=verify-full.
	DSN string `yaml:"dsn"`
	// StartWait is how long a starting process of the postgres backend
	// waits for a database it cannot reach (one restarting along with
	// it) before it gives up; 0 gives up at the first failure.
	StartWait Duration `yaml:"start_wait"`
	// CommitsInFlight is how many group commits the postgres backend
	// keeps in flight at once, each on a connection of its own (1 to 16;
	// 1, the default, commits one group at a time; 0 means 1).
	CommitsInFlight int `yaml:"commits_in_flight"`
}

// LabelConfig is a named set of platform properties.
type LabelConfig struct {
	Name       string            `yaml:"name"`
	Properties map[string]string `yaml:"properties"`
}

// CohortConfig is a named group of workers, by label.
type CohortConfig struct {
	Name   string   `yaml:"name"`
	Labels []string `yaml:"labels"`
}

// FairnessConfig configures the invocation trie (docs/CONFIGURATION.md).
type FairnessConfig struct {
	// Keys are the invocation key extractors, outermost first; an empty
	// list means plain priority and FIFO.
	Keys []string `yaml:"keys"`
	// Stickiness is, per level of Keys, what switching a worker to another
	// invocation at that level costs.
	Stickiness []Duration `yaml:"stickiness"`
	// PersistentWorkerStickiness is how long the fair choice may wait
	// while a worker stays on actions of a persistentWorkerKey it holds
	// warm; 0 turns the preference off.
	PersistentWorkerStickiness Duration `yaml:"persistent_worker_stickiness"`
	// PriorityHalving is how many priority points double a share.
	PriorityHalving float64 `yaml:"priority_halving"`
	// UserHeader is the gRPC header the user key reads until
	// authentication supplies the user.
	UserHeader string `yaml:"user_header"`
	// LongestFirst is whose invocations run their longest expected
	// actions first: off, gantry or all.
	LongestFirst string `yaml:"longest_first"`
}

// WorkerConfig configures a worker: the one `gantry serve` embeds, or a
// standalone `gantry worker`.
type WorkerConfig struct {
	// Enabled runs a worker inside `gantry serve`.
	Enabled bool `yaml:"enabled"`
	// ID names the worker; empty uses the host name.
	ID string `yaml:"id"`
	// Cores is the execute capacity; 0 uses the number of CPUs.
	Cores int `yaml:"cores"`
	// Memory is the memory offered to actions; 0 uses the machine's.
	Memory ByteSize `yaml:"memory"`
	// InputFetchSlots bounds concurrent input fetches; 0 means as many as cores.
	InputFetchSlots int `yaml:"input_fetch_slots"`
	// ReportSlots bounds concurrent output uploads; 0 means as many as cores.
	ReportSlots int `yaml:"report_slots"`
	// Properties are platform properties offered in addition to the
	// host's OSFamily and ISA. A value "*" matches any value; a list
	// offers several values.
	Properties map[string]Values `yaml:"properties"`
	// Queues are the provision queues the worker serves; empty serves all.
	Queues []string `yaml:"queues"`
	// Instances are the instance names the worker serves; empty or "*"
	// serves every instance.
	Instances []string `yaml:"instances"`
	// Resources are named capacities (e.g. gpu: 2) that actions ask for
	// with resource:NAME properties.
	Resources map[string]int64 `yaml:"resources"`
	// ProcessWrappers are named command prefixes that actions select with
	// the process-wrapper platform property.
	ProcessWrappers map[string][]string `yaml:"process_wrappers"`
	// AcceptUnknownProperties lets the worker take actions with
	// properties it does not list.
	AcceptUnknownProperties bool `yaml:"accept_unknown_properties"`
	// WorkDir holds exec roots and the file cache; empty uses data_dir/worker.
	WorkDir string `yaml:"work_dir"`
	// CacheMaxSize bounds the input file cache.
	CacheMaxSize ByteSize `yaml:"cache_max_size"`
	// ChunkThreshold: input and output files of at least this size move
	// as content-defined chunks when the server supports it; 0 = off.
	ChunkThreshold ByteSize `yaml:"chunk_threshold"`
	// Wrapper is an argv prefix every action runs under (e.g. a sandbox).
	Wrapper []string `yaml:"wrapper"`
	// Sandbox configures the bubblewrap sandbox (see sandbox.go).
	Sandbox SandboxConfig `yaml:"sandbox"`
	// MinFreeDisk is the free space the work directory's file system
	// keeps while actions run (the disk guard; 0 = off).
	MinFreeDisk ByteSize `yaml:"min_free_disk"`
	// MaxFileSize limits each file an action writes (RLIMIT_FSIZE; 0 = off).
	MaxFileSize ByteSize `yaml:"max_file_size"`
	// LinkInputDirectories is auto (big input directories of sandboxed
	// actions are bound whole from a tree cache) or off (see dirlink.go).
	LinkInputDirectories string `yaml:"link_input_directories"`
	// PersistentWorkers configures remote persistent workers (see
	// persistentworkers.go).
	PersistentWorkers PersistentWorkersConfig `yaml:"persistent_workers"`
	// StopGrace is how long a standalone worker stopped by SIGTERM
	// drains: it takes no more work and lets its running actions finish
	// for up to this long before it stops the rest; 0 stops at once.
	StopGrace Duration `yaml:"stop_grace"`
	// StoreResultsLater lets an action's slots go once the scheduler has
	// accepted its result, before the result is stored; the worker keeps
	// the result until the scheduler says it is stored.
	StoreResultsLater bool `yaml:"store_results_later"`
}

// Storage configures the CAS and the ActionCache.
type Storage struct {
	CAS         CASConfig `yaml:"cas"`
	ActionCache ACConfig  `yaml:"action_cache"`
	// MaxBatchSize bounds the total size of blobs in one BatchUpdateBlobs or
	// BatchReadBlobs call; the gRPC message limit is raised to fit it.
	MaxBatchSize ByteSize `yaml:"max_batch_size"`
	// ReadChunkSize is the size of the chunks ByteStream Read sends.
	ReadChunkSize ByteSize `yaml:"read_chunk_size"`
	// InlineLimit bounds the bytes GetActionResult inlines in one response.
	InlineLimit ByteSize `yaml:"inline_limit"`
	// CompletenessCheck makes GetActionResult serve only results whose
	// output blobs are all in the CAS.
	CompletenessCheck bool `yaml:"completeness_check"`
	// S3 is the bucket of the s3 backends (see s3.go).
	S3 S3Config `yaml:"s3"`
}

// CASConfig configures the content-addressable store.
type CASConfig struct {
	// Backend is "disk", "memory" or "s3".
	Backend string `yaml:"backend"`
	// MaxSize bounds the stored bytes; least recently used blobs are evicted.
	MaxSize ByteSize `yaml:"max_size"`
	// Fsync flushes each blob to stable storage before it becomes visible.
	Fsync bool `yaml:"fsync"`
	// PackThreshold is the size up to which blobs are appended to pack
	// segments instead of getting a file each; 0 uses the default (64KiB).
	PackThreshold ByteSize `yaml:"pack_threshold"`
	// SegmentSize is the size of a pack segment; 0 uses the default (64MiB).
	SegmentSize ByteSize `yaml:"segment_size"`
	// DirectIOThreshold: blobs of at least this size are written with
	// O_DIRECT, bypassing the page cache; 0 turns it off.
	DirectIOThreshold ByteSize `yaml:"direct_io_threshold"`
	// Cache is the local disk tier in front of the s3 backend.
	Cache CASCacheConfig `yaml:"cache"`
	// MinLifetime is how long a blob FindMissingBlobs reported present,
	// or a GetActionResult answer references, is kept at least (clients
	// that keep only digests rely on it); 0 promises nothing.
	MinLifetime Duration `yaml:"min_lifetime"`
}

// CASCacheConfig configures the disk tier every frontend keeps in front
// of the bucket (backend s3 only).
type CASCacheConfig struct {
	// MaxSize bounds the tier's bytes; 0 turns the tier off.
	MaxSize ByteSize `yaml:"max_size"`
}

// ACConfig configures the action cache.
type ACConfig struct {
	// Backend is "disk", "memory" or "s3".
	Backend string `yaml:"backend"`
	// MaxSize bounds the stored bytes (disk) or, divided by 1 KiB, the
	// number of entries (memory).
	MaxSize ByteSize `yaml:"max_size"`
}

// GRPC tunes the gRPC server.
type GRPC struct {
	// MaxMessageSize is the largest gRPC message accepted; 0 derives it
	// from storage.max_batch_size.
	MaxMessageSize ByteSize `yaml:"max_message_size"`
	// MaxStreamsPerIdentity bounds the REAPI streams (ByteStream,
	// Execute, WaitExecution, GetTree) one caller has open at once;
	// MaxUploadsPerIdentity bounds its ByteStream uploads among them.
	// 0: no bound.
	MaxStreamsPerIdentity int `yaml:"max_streams_per_identity"`
	MaxUploadsPerIdentity int `yaml:"max_uploads_per_identity"`
}

// Default bounds per caller. A Bazel build with --jobs=200 and more keeps
// a few hundred uploads and Execute streams open at once; these leave it
// room several times over, while one caller can no longer hold thousands
// of stalled streams (each upload holds a temporary file and buffers).
const (
	defaultMaxStreamsPerIdentity = 4000
	defaultMaxUploadsPerIdentity = 1000
)

// LogConfig configures logging.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text or json.
	Format string `yaml:"format"`
}

// Default returns the configuration `gantry serve` uses with no file.
func Default() Config {
	return Config{
		Listen:     "127.0.0.1:8980",
		HTTPListen: "127.0.0.1:9090",
		DataDir:    "./gantry-data",
		Status:     StatusConfig{Refresh: Duration(10 * time.Second), History: defaultHistory},
		Storage: Storage{
			CAS:               CASConfig{Backend: "disk", MaxSize: 10 << 30, Cache: CASCacheConfig{MaxSize: 10 << 30}, MinLifetime: Duration(3 * time.Hour)},
			ActionCache:       ACConfig{Backend: "disk", MaxSize: 1 << 30},
			MaxBatchSize:      4 << 20,
			ReadChunkSize:     1 << 20,
			InlineLimit:       1 << 20,
			CompletenessCheck: true,
			S3:                defaultS3(),
		},
		Scheduler: defaultScheduler(),
		Worker: WorkerConfig{
			Enabled:                 true,
			AcceptUnknownProperties: true,
			CacheMaxSize:            10 << 30,
			ChunkThreshold:          16 << 20,
			Sandbox:                 defaultSandbox(),
			MinFreeDisk:             1 << 30,
			LinkInputDirectories:    LinkInputDirectoriesAuto,
			PersistentWorkers:       defaultPersistentWorkers(),
		},
		GRPC:    GRPC{MaxStreamsPerIdentity: defaultMaxStreamsPerIdentity, MaxUploadsPerIdentity: defaultMaxUploadsPerIdentity},
		Log:     LogConfig{Level: "info", Format: "text"},
		Auth:    AuthConfig{JWT: JWTConfig{SubjectClaim: "sub", RequireExpiry: true}, CertificateNames: []string{"cn"}, HTTPSessionTTL: Duration(12 * time.Hour)},
		Role:    RoleAll,
		Cluster: defaultCluster(),

		RemoteAsset: defaultRemoteAsset(),
	}
}

// defaultScheduler is the scheduler section's defaults, as
// docs/CONFIGURATION.md lists them. The scheduler fills in the same values
// for zero fields (scheduler.DefaultConfig); a test of the assembly
// (internal/server) keeps the two equal, so that config need not import
// the scheduler.
func defaultScheduler() SchedulerConfig {
	return SchedulerConfig{
		HeartbeatInterval: Duration(2 * time.Second),
		HeartbeatTimeout:  Duration(20 * time.Second),
		ReconcileWindow:   Duration(3 * time.Second),
		MaxAttempts:       3,
		CallerGrace:       Duration(time.Minute),
		Retention:         Duration(10 * time.Minute),
		UnsatisfiableWait: Duration(10 * time.Minute),
		StartupGrace:      Duration(time.Minute),
		PreemptionDelay:   Duration(10 * time.Second),
		Preemption:        "cancel",
		MaxSuspend:        Duration(10 * time.Minute),
		Store:             StoreConfig{Backend: "embedded", StartWait: Duration(time.Minute), CommitsInFlight: 1},
		LiveOutput:        defaultLiveOutput(),
		Fairness: FairnessConfig{
			Keys:            append([]string(nil), invocation.Default...),
			PriorityHalving: 10,
			UserHeader:      invocation.DefaultUserHeader,
			LongestFirst:    "gantry",

			PersistentWorkerStickiness: Duration(10 * time.Second),
		},
		Durations: DurationsConfig{MaxShapes: 50000, HalfLife: Duration(72 * time.Hour),
			TimeoutMultiple: 5, TimeoutFloor: Duration(5 * time.Minute), TimeoutMinSamples: 3},
		Autoscaling: AutoscalingConfig{TargetDrain: Duration(10 * time.Minute)},
		SizeClasses: SizeClassesConfig{MaxSlowdown: 1.5, Exploration: 0.05, LearnedResources: true},
	}
}

// Load reads a YAML file over the defaults.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	cfg := Default()
	if err := Parse(data, &cfg); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML into cfg (which holds the defaults), rejecting unknown
// keys and bad values with the key's path, then validates the result.
func Parse(data []byte, cfg *Config) error {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if err.Error() == "EOF" {
			return cfg.Validate()
		}
		return fmt.Errorf("not valid YAML: %w", err)
	}
	if len(root.Content) == 0 {
		return cfg.Validate()
	}
	if err := decodeStrict(root.Content[0], reflect.ValueOf(cfg).Elem(), ""); err != nil {
		return err
	}
	return cfg.Validate()
}

// decodeStrict walks a mapping node against a struct, decoding each known
// key into its field and reporting unknown keys and bad values by path.
func decodeStrict(n *yaml.Node, v reflect.Value, path string) error {
	if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct && n.Kind == yaml.SequenceNode {
		out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := decodeStrict(item, out.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(out)
		return nil
	}
	if v.Kind() != reflect.Struct {
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return fmt.Errorf("%s (line %d): %s", displayPath(path), n.Line, cleanYAMLError(err))
		}
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s (line %d): expected a mapping of keys to values", displayPath(path), n.Line)
	}
	fields := map[string]int{}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		idx, ok := fields[k.Value]
		if !ok {
			known := make([]string, 0, len(fields))
			for name := range fields {
				known = append(known, name)
			}
			sort.Strings(known)
			return fmt.Errorf("%s (line %d): unknown key; known keys here are: %s", p, k.Line, strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return fmt.Errorf("%s (line %d): key given twice", p, k.Line)
		}
		seen[k.Value] = true
		if err := decodeStrict(val, v.Field(idx), p); err != nil {
			return err
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func displayPath(p string) string {
	if p == "" {
		return "(top level)"
	}
	return p
}

func cleanYAMLError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "yaml: unmarshal errors:\n")
	return strings.TrimSpace(s)
}

// Validate checks values that parse but make no sense.
func (c *Config) Validate() error {
	var errs []string
	bad := func(path, format string, args ...any) {
		errs = append(errs, path+": "+fmt.Sprintf(format, args...))
	}
	if c.Listen == "" {
		bad("listen", "must be an address such as 127.0.0.1:8980")
	}
	if c.DataDir == "" {
		bad("data_dir", "must be a directory path")
	}
	validateStorage(c.Storage, bad)
	validateStatus(c.Status, bad)
	validateRemoteAsset(c.RemoteAsset, bad)
	validateGRPC(c.GRPC, bad)
	validateScheduler(c.Scheduler, bad)
	validateWorker(c.Worker, bad)
	validateChroot(c, bad)
	validateLog(c.Log, bad)
	c.validateSecurity(bad)
	c.validateCluster(bad)
	c.validateObservability(bad)
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("invalid configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// validateGRPC checks the per-caller stream bounds.
func validateGRPC(g GRPC, bad func(path, format string, args ...any)) {
	for path, v := range map[string]int{"grpc.max_streams_per_identity": g.MaxStreamsPerIdentity, "grpc.max_uploads_per_identity": g.MaxUploadsPerIdentity} {
		if v < 0 {
			bad(path, "%d is negative; give the most streams one caller may have open, or 0 for no bound", v)
		}
	}
	if g.MaxStreamsPerIdentity > 0 && g.MaxUploadsPerIdentity > g.MaxStreamsPerIdentity {
		bad("grpc.max_uploads_per_identity", "%d is more than grpc.max_streams_per_identity (%d), which bounds uploads too; raise both", g.MaxUploadsPerIdentity, g.MaxStreamsPerIdentity)
	}
}

// GRPCMaxMessageSize is the effective gRPC message limit.
func (c *Config) GRPCMaxMessageSize() int {
	if c.GRPC.MaxMessageSize > 0 {
		return int(c.GRPC.MaxMessageSize)
	}
	return int(max(c.Storage.MaxBatchSize+1<<20, 4<<20))
}
