package config

import "time"

// LiveOutputConfig bounds the live output the scheduler holds: the
// stdout and stderr of running actions, which clients follow while the
// actions run (internal/logstream).
type LiveOutputConfig struct {
	// BufferSize is how many bytes of each stream are kept (the last
	// ones); a reader further behind is told where to resume.
	BufferSize ByteSize `yaml:"buffer_size"`
	// Keep is how long a stream stays readable after its action ended.
	Keep Duration `yaml:"keep"`
}

func defaultLiveOutput() LiveOutputConfig {
	return LiveOutputConfig{BufferSize: 1 << 20, Keep: Duration(5 * time.Minute)}
}

// validateLiveOutput checks scheduler.live_output.
func validateLiveOutput(c LiveOutputConfig, bad func(path, format string, args ...any)) {
	if c.BufferSize < 4<<10 || c.BufferSize > 64<<20 {
		bad("scheduler.live_output.buffer_size", "must be between 4KiB and 64MiB: it is the bytes of each running action's stdout and stderr the scheduler keeps in memory")
	}
	if c.Keep <= 0 {
		bad("scheduler.live_output.keep", "must be positive: it is how long an ended action's live output stays readable")
	}
}
