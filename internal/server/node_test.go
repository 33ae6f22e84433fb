package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// TestEveryRoleHasTheSameServerOptions: the gRPC servers of role all, a
// frontend node and a scheduler node are built with the same options
// (sizes, buffers, stream workers, codec, keepalive, TLS, interceptors);
// only what a part adds (the frontend's forwarding) differs.
func TestEveryRoleHasTheSameServerOptions(t *testing.T) {
	dsn := pgtest.Start(t)
	all := clusterConfig(t, config.RoleAll, dsn)
	all.Scheduler.Store = config.StoreConfig{Backend: "memory"}
	all.Storage.CAS.Backend, all.Storage.ActionCache.Backend = "memory", "memory"
	fe := clusterConfig(t, config.RoleFrontend, dsn)
	options := map[string][]string{}
	var feAddr string
	for _, cfg := range []config.Config{all, fe} {
		s, err := New(cfg, quietLogger())
		if err != nil {
			t.Fatalf("role %s: %v", cfg.Role, err)
		}
		options[cfg.Role] = optionNames(s)
		if cfg.Role == config.RoleFrontend {
			feAddr = s.GRPCAddr()
		}
		defer s.Stop()
	}
	sc := clusterConfig(t, config.RoleScheduler, dsn)
	sc.Cluster.CAS = feAddr
	s, err := New(sc, quietLogger())
	if err != nil {
		t.Fatalf("role scheduler: %v", err)
	}
	defer s.Stop()
	options[config.RoleScheduler] = optionNames(s)

	want := options[config.RoleAll]
	for _, must := range []string{"NumStreamWorkers(64)", "SharedWriteBuffer(true)", "WriteBufferSize(256KiB)", "BufferPool(frontend)", "ForceServerCodecV2(raw over frontend)"} {
		if !slices.Contains(want, must) {
			t.Errorf("role all lacks %s: %v", must, want)
		}
	}
	for role, got := range options {
		if !slices.Equal(got, want) {
			t.Errorf("role %s has other gRPC server options than role all:\n%s\nwant\n%s", role, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func optionNames(s *Server) []string {
	out := make([]string, len(s.grpcOptions))
	for i, o := range s.grpcOptions {
		out[i] = o.name
	}
	return out
}

// TestClosersRunLastFirst: shutdown closes what was opened in the
// reverse order, each once, including what is pushed while closing
// would not be lost.
func TestClosersRunLastFirst(t *testing.T) {
	var c closers
	var order []int
	for i := range 3 {
		c.push(func() { order = append(order, i) })
	}
	c.close()
	c.close()
	if !slices.Equal(order, []int{2, 1, 0}) {
		t.Fatalf("closed in order %v, want [2 1 0]", order)
	}
}
