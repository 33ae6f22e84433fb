package frontend

import (
	"context"
	"slices"

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
			SymlinkAbsolutePathStrategy:     s.symlinkStrategy(req.InstanceName),
			SupportedCompressors:            []repb.Compressor_Value{repb.Compressor_ZSTD},
			SupportedBatchUpdateCompressors: []repb.Compressor_Value{repb.Compressor_ZSTD},
			SplitBlobSupport:                true,
			SpliceBlobSupport:               true,
			FastCdc_2020Params:              &repb.FastCdc2020Params{AvgChunkSizeBytes: fastCDCAverage},
			RepMaxCdcParams:                 &repb.RepMaxCdcParams{MinChunkSizeBytes: repMaxMinChunk, HorizonSizeBytes: repMaxHorizon},
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

// symlinkStrategy says whether input trees of instance may hold symlinks
// with absolute targets: only where its actions run with the input root
// as "/", so that such a target stays inside it (Options.ChrootInstances).
func (s *Server) symlinkStrategy(instance string) repb.SymlinkAbsolutePathStrategy_Value {
	if slices.Contains(s.opts.ChrootInstances, instance) {
		return repb.SymlinkAbsolutePathStrategy_ALLOWED
	}
	return repb.SymlinkAbsolutePathStrategy_DISALLOWED
}
