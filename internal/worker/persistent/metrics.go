package persistent

import "github.com/prometheus/client_golang/prometheus"

// collector exports a pool's KeyStats, read at scrape time.
type collector struct {
	p                                         *Pool
	procs, warm, cold, restarts, evict, saved *prometheus.Desc
}

// Collector exports the pool's metrics, labelled by persistentWorkerKey.
func (p *Pool) Collector() prometheus.Collector {
	key := []string{"key"}
	return &collector{p: p,
		procs:    prometheus.NewDesc("gantry_worker_persistent_processes", "Persistent worker processes running, by persistentWorkerKey.", key, nil),
		warm:     prometheus.NewDesc("gantry_worker_persistent_warm_requests_total", "Actions served by a persistent worker process already running (hits).", key, nil),
		cold:     prometheus.NewDesc("gantry_worker_persistent_cold_starts_total", "Actions that started a persistent worker process.", key, nil),
		restarts: prometheus.NewDesc("gantry_worker_persistent_restarts_total", "Persistent worker processes that died or were killed (crash, timeout, protocol error, cancelled request).", key, nil),
		evict:    prometheus.NewDesc("gantry_worker_persistent_evictions_total", "Idle persistent worker processes ended (idle_timeout, min_free_memory, max_total).", key, nil),
		saved:    prometheus.NewDesc("gantry_worker_persistent_saved_seconds_total", "Estimated time warm processes saved: per warm request, the key's mean cold request time minus its own.", key, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.procs, c.warm, c.cold, c.restarts, c.evict, c.saved} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.p.Stats() {
		ch <- prometheus.MustNewConstMetric(c.procs, prometheus.GaugeValue, float64(s.Processes), s.Key)
		ch <- prometheus.MustNewConstMetric(c.warm, prometheus.CounterValue, float64(s.Warm), s.Key)
		ch <- prometheus.MustNewConstMetric(c.cold, prometheus.CounterValue, float64(s.Cold), s.Key)
		ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(s.Restarts), s.Key)
		ch <- prometheus.MustNewConstMetric(c.evict, prometheus.CounterValue, float64(s.Evicted), s.Key)
		ch <- prometheus.MustNewConstMetric(c.saved, prometheus.CounterValue, s.Saved.Seconds(), s.Key)
	}
}
