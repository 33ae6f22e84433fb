// Package loadgen is the load generator behind `gantry bench`: it sends
// many small unique actions to a REAPI server (Gantry or any other) at a
// given concurrency, for a number of actions or a time, checks every
// result, and reports throughput and latency (Run, with a Plan). For a
// Gantry server it can also run in-process no-op workers, to measure the
// scheduler and the Execute path alone, explain a run that makes no
// progress from the scheduler's view of its workers, and measure the
// machine's spawn rate as the baseline of a run's rate.
//
// The command (cmd/gantry) keeps the flags, their validation and the
// dialling; the measurement and its report are here.
package loadgen
