package client

import (
	"context"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/frontend"
)

func TestDial(t *testing.T) {
	tests := []struct {
		target  string
		wantErr string
	}{
		{"127.0.0.1:8980", ""},
		{"dns:///localhost:8980", ""},
		{"unix:///tmp/gantry.sock", ""},
		{"", "no server address"},
		{"  ", "no server address"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			conn, err := Dial(tt.target)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Dial(%q): %v", tt.target, err)
				}
				conn.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Dial(%q) = %v, want an error containing %q", tt.target, err, tt.wantErr)
			}
		})
	}
}

func TestBatchLimit(t *testing.T) {
	tests := []struct {
		name string
		caps *repb.ServerCapabilities
		want int64
	}{
		{"nil", nil, DefaultMaxBatch},
		{"no cache capabilities", &repb.ServerCapabilities{}, DefaultMaxBatch},
		{"zero means the gRPC default", &repb.ServerCapabilities{CacheCapabilities: &repb.CacheCapabilities{}}, DefaultMaxBatch},
		{"server limit", &repb.ServerCapabilities{CacheCapabilities: &repb.CacheCapabilities{MaxBatchTotalSizeBytes: 10 << 20}}, 10 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BatchLimit(tt.caps); got != tt.want {
				t.Errorf("BatchLimit = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestGetCapabilities(t *testing.T) {
	conn, _, _ := startFrontend(t, frontend.Options{MaxBatchSize: 1 << 20})
	caps, err := GetCapabilities(context.Background(), conn, "main")
	if err != nil {
		t.Fatal(err)
	}
	if BatchLimit(caps) != 1<<20 {
		t.Errorf("BatchLimit of the server's capabilities = %d, want %d", BatchLimit(caps), 1<<20)
	}
	if _, err := GetCapabilities(context.Background(), conn, "bad/blobs"); err == nil || !strings.Contains(err.Error(), `instance "bad/blobs"`) {
		t.Errorf("GetCapabilities with a reserved instance name: %v, want an error naming the instance", err)
	}
}
