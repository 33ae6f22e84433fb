package config

// StatusConfig tunes the status pages under /status on the HTTP port.
type StatusConfig struct {
	// Refresh is how often the list pages reload themselves (a meta
	// refresh); 0 turns it off. ?refresh=0 turns it off for one page.
	Refresh Duration `yaml:"refresh"`
}
