package frontend

import (
	"context"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	smpb "github.com/bazelbuild/remote-apis/build/bazel/semver"

	"github.com/gantry-build/gantry/internal/digest"
)

// LowAPIVersion and HighAPIVersion bound the REAPI versions Gantry speaks.
// Bazel 2.x and 4.x announce 2.0, so the low bound stays there.
var (
	LowAPIVersion  = &smpb.SemVer{Major: 2, Minor: 0}
	HighAPIVersion = &smpb.SemVer{Major: 2, Minor: 13}
)

// GetCapabilities implements REAPI Capabilities.
func (s *Server) GetCapabilities(_ context.Context, req *repb.GetCapabilitiesRequest) (*repb.ServerCapabilities, error) {
	if err := checkInstance(req.InstanceName); err != nil {
		return nil, err
	}
	fns := append([]repb.DigestFunction_Value(nil), digest.Supported...)
	return &repb.ServerCapabilities{
		CacheCapabilities: &repb.CacheCapabilities{
			DigestFunctions:                 fns,
			ActionCacheUpdateCapabilities:   &repb.ActionCacheUpdateCapabilities{UpdateEnabled: true},
			MaxBatchTotalSizeBytes:          s.opts.MaxBatchSize,
			SymlinkAbsolutePathStrategy:     repb.SymlinkAbsolutePathStrategy_DISALLOWED,
			SupportedCompressors:            []repb.Compressor_Value{repb.Compressor_ZSTD},
			SupportedBatchUpdateCompressors: []repb.Compressor_Value{repb.Compressor_ZSTD},
		},
		ExecutionCapabilities: &repb.ExecutionCapabilities{
			DigestFunction:  repb.DigestFunction_SHA256,
			DigestFunctions: fns,
			ExecEnabled:     s.opts.ExecEnabled,
			ExecutionPriorityCapabilities: &repb.PriorityCapabilities{
				Priorities: []*repb.PriorityCapabilities_PriorityRange{{MinPriority: -1 << 31, MaxPriority: 1<<31 - 1}},
			},
		},
		LowApiVersion:  LowAPIVersion,
		HighApiVersion: HighAPIVersion,
	}, nil
}
