package worker

import (
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/worker/dircache"
)

// StageBuckets are the bounds, in seconds, of the worker's stage
// histograms (the same as the server's).
var StageBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// collector exports a worker's own state: its leases and its input file
// cache, read at scrape time.
type collector struct {
	w                                      *Worker
	leases, cacheBytes, cacheMax, entries  *prometheus.Desc
	byStage                                *prometheus.Desc
	hits, misses, evictions, downloaded    *prometheus.Desc
	trees, treeBuilds, treeHits, treeEvict *prometheus.Desc
	diskLow                                *prometheus.Desc
	chunked, chunkedBytes, chunkSaved      *prometheus.Desc
	chunkCache, chunkCorrupt               *prometheus.Desc
}

// RegisterMetrics registers the worker's metrics with reg: active leases
// the input file cache (usage, hits, misses, evictions) and the tree
// cache of directory linking (all 0 when it is off). With stages
// the worker also observes its own stage durations
// (gantry_worker_stage_duration_seconds); a worker inside `gantry serve`
// leaves that to the server, which sees every worker's results.
func (w *Worker) RegisterMetrics(reg prometheus.Registerer, stages bool) error {
	c := &collector{w: w,
		leases: prometheus.NewDesc("gantry_worker_active_leases", "Actions this worker holds (fetching, executing or uploading).", nil, nil),
		byStage: prometheus.NewDesc("gantry_worker_stage_leases", "Actions this worker holds in each stage (input_fetch, execute, output_upload).",
			[]string{"stage"}, nil),
		cacheBytes: prometheus.NewDesc("gantry_worker_input_cache_bytes", "Bytes of input files in the worker's cache.", nil, nil),
		cacheMax:   prometheus.NewDesc("gantry_worker_input_cache_max_bytes", "The input cache's limit (worker.cache_max_size; 0: none).", nil, nil),
		entries:    prometheus.NewDesc("gantry_worker_input_cache_files", "Input files in the worker's cache.", nil, nil),
		hits:       prometheus.NewDesc("gantry_worker_input_cache_hits_total", "Input files found in the cache (or already being fetched).", nil, nil),
		misses:     prometheus.NewDesc("gantry_worker_input_cache_misses_total", "Input files fetched from the CAS.", nil, nil),
		evictions:  prometheus.NewDesc("gantry_worker_input_cache_evictions_total", "Input files evicted to stay within the cache's limit.", nil, nil),
		downloaded: prometheus.NewDesc("gantry_worker_input_cache_downloaded_bytes_total", "Bytes of input files fetched from the CAS.", nil, nil),
		trees:      prometheus.NewDesc("gantry_worker_input_trees", "Input directories held whole in the tree cache (worker.link_input_directories).", nil, nil),
		treeBuilds: prometheus.NewDesc("gantry_worker_input_tree_builds_total", "Input directories laid out in the tree cache.", nil, nil),
		treeHits:   prometheus.NewDesc("gantry_worker_input_tree_hits_total", "Input directories bound from a tree already cached.", nil, nil),
		treeEvict:  prometheus.NewDesc("gantry_worker_input_tree_evictions_total", "Idle trees deleted to keep the file cache within worker.cache_max_size.", nil, nil),
		diskLow:    prometheus.NewDesc("gantry_worker_disk_low", "1 while the work directory's file system is below worker.min_free_disk and the worker asks for no work.", nil, nil),
		chunked: prometheus.NewDesc("gantry_worker_chunked_transfers_total", "Large input (download) and output (upload) files moved as content-defined chunks (worker.chunk_threshold).",
			[]string{"direction"}, nil),
		chunkedBytes: prometheus.NewDesc("gantry_worker_chunked_transferred_bytes_total", "Bytes of chunks sent (upload) or fetched (download) by chunked transfers.",
			[]string{"direction"}, nil),
		chunkSaved: prometheus.NewDesc("gantry_worker_chunked_saved_bytes_total", "Bytes chunked transfers did not move: chunks the CAS already held (upload) or the worker's chunk cache held (download).",
			[]string{"direction"}, nil),
		chunkCache:   prometheus.NewDesc("gantry_worker_chunk_cache_bytes", "Bytes of input chunks kept in the worker's chunk directory (work_dir/chunks).", nil, nil),
		chunkCorrupt: prometheus.NewDesc("gantry_worker_chunk_cache_corrupt_total", "Chunks of the worker's chunk directory that failed their digest check; they were removed and fetched again.", nil, nil),
	}
	if err := reg.Register(c); err != nil {
		return err
	}
	if w.pool != nil {
		if err := reg.Register(w.pool.Collector()); err != nil {
			return err
		}
	}
	if stages {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gantry_worker_stage_duration_seconds",
			Help:    "Time this worker spent per action in each stage (input_fetch, execute, output_upload, worker: all of it).",
			Buckets: StageBuckets,
		}, []string{"stage"})
		if err := reg.Register(h); err != nil {
			return err
		}
		w.stages = [4]prometheus.Observer{h.WithLabelValues("input_fetch"), h.WithLabelValues("execute"), h.WithLabelValues("output_upload"), h.WithLabelValues("worker")}
	}
	return nil
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leases, c.byStage, c.cacheBytes, c.cacheMax, c.entries, c.hits, c.misses, c.evictions, c.downloaded, c.trees, c.treeBuilds, c.treeHits, c.treeEvict, c.diskLow, c.chunked, c.chunkedBytes, c.chunkSaved, c.chunkCache, c.chunkCorrupt} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.w.mu.Lock()
	n := len(c.w.leases)
	var fetching, executing, reporting int
	for _, l := range c.w.leases {
		switch l.stage {
		case workerpb.Stage_INPUT_FETCH:
			fetching++
		case workerpb.Stage_EXECUTING:
			executing++
		case workerpb.Stage_REPORTING:
			reporting++
		}
	}
	c.w.mu.Unlock()
	st := c.w.cache.Stats()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	k := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(c.leases, float64(n))
	// The stage names are those of gantry_worker_stage_duration_seconds.
	for stage, v := range map[string]int{"input_fetch": fetching, "execute": executing, "output_upload": reporting} {
		ch <- prometheus.MustNewConstMetric(c.byStage, prometheus.GaugeValue, float64(v), stage)
	}
	g(c.cacheBytes, float64(st.Bytes))
	g(c.cacheMax, float64(st.MaxBytes))
	g(c.entries, float64(st.Entries))
	k(c.hits, float64(st.Hits))
	k(c.misses, float64(st.Misses))
	k(c.evictions, float64(st.Evictions))
	k(c.downloaded, float64(st.DownloadedBytes))
	var ts dircache.Stats
	if c.w.trees != nil {
		ts = c.w.trees.Stats()
	}
	g(c.trees, float64(ts.Trees))
	k(c.treeBuilds, float64(ts.Builds))
	k(c.treeHits, float64(ts.Hits))
	k(c.treeEvict, float64(ts.Evictions))
	low := 0.0
	if c.w.diskLow.holding() {
		low = 1
	}
	g(c.diskLow, low)
	t := &c.w.chunkTally
	for i, dir := range []string{"upload", "download"} {
		ch <- prometheus.MustNewConstMetric(c.chunked, prometheus.CounterValue, float64(t.transfers[i].Load()), dir)
		ch <- prometheus.MustNewConstMetric(c.chunkedBytes, prometheus.CounterValue, float64(t.sent[i].Load()), dir)
		ch <- prometheus.MustNewConstMetric(c.chunkSaved, prometheus.CounterValue, float64(t.saved[i].Load()), dir)
	}
	var chunkBytes int64
	if c.w.chunkCache != nil {
		chunkBytes = c.w.chunkCache.Size()
	}
	g(c.chunkCache, float64(chunkBytes))
	k(c.chunkCorrupt, float64(t.corrupt.Load()))
}

// observeStages records a finished lease's stage durations, when the
// worker keeps its own stage histograms.
func (w *Worker) observeStages(md *repb.ExecutedActionMetadata) {
	if w.stages[0] == nil {
		return
	}
	for i, p := range [4][2]*timestamppb.Timestamp{
		{md.InputFetchStartTimestamp, md.InputFetchCompletedTimestamp},
		{md.ExecutionStartTimestamp, md.ExecutionCompletedTimestamp},
		{md.OutputUploadStartTimestamp, md.OutputUploadCompletedTimestamp},
		{md.WorkerStartTimestamp, md.WorkerCompletedTimestamp},
	} {
		if p[0] == nil || p[1] == nil {
			continue
		}
		if d := p[1].AsTime().Sub(p[0].AsTime()); d >= 0 {
			w.stages[i].Observe(d.Seconds())
		}
	}
}
