package frontend

import (
	"slices"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
)

func TestGetCapabilities(t *testing.T) {
	allFns := []repb.DigestFunction_Value{
		repb.DigestFunction_SHA256, repb.DigestFunction_SHA1, repb.DigestFunction_MD5,
		repb.DigestFunction_SHA384, repb.DigestFunction_SHA512, repb.DigestFunction_BLAKE3,
	}
	tests := []struct {
		name     string
		instance string
		opts     func(*Options)
		wantCode codes.Code
	}{
		{"default instance", "", nil, codes.OK},
		{"multi-segment instance", "a/b/c", nil, codes.OK},
		{"exec enabled", "", func(o *Options) { o.ExecEnabled = true }, codes.OK},
		{"small batches", "", func(o *Options) { o.MaxBatchSize = 1 << 20 }, codes.OK},
		{"reserved instance", "main/blobs", nil, codes.InvalidArgument},
		{"empty segment", "a//b", nil, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := defaultOptions()
			if tt.opts != nil {
				tt.opts(&opts)
			}
			e := newEnv(t, nil, opts)
			caps, err := e.caps.GetCapabilities(testCtx(t), &repb.GetCapabilitiesRequest{InstanceName: tt.instance})
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode, "")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v := caps.LowApiVersion; v.GetMajor() != 2 || v.GetMinor() != 0 {
				t.Errorf("low_api_version = %v, want 2.0", v)
			}
			if v := caps.HighApiVersion; v.GetMajor() != 2 || v.GetMinor() != 13 {
				t.Errorf("high_api_version = %v, want 2.13", v)
			}
			cc := caps.CacheCapabilities
			for _, fn := range allFns {
				if !slices.Contains(cc.GetDigestFunctions(), fn) {
					t.Errorf("cache digest_functions %v lacks %v", cc.GetDigestFunctions(), fn)
				}
				if !slices.Contains(caps.ExecutionCapabilities.GetDigestFunctions(), fn) {
					t.Errorf("execution digest_functions lacks %v", fn)
				}
			}
			if cc.GetDigestFunctions()[0] != repb.DigestFunction_SHA256 {
				t.Errorf("first digest function is %v, want the default SHA256", cc.GetDigestFunctions()[0])
			}
			if !slices.Contains(cc.GetSupportedCompressors(), repb.Compressor_ZSTD) {
				t.Errorf("supported_compressors = %v, want ZSTD", cc.GetSupportedCompressors())
			}
			if !slices.Contains(cc.GetSupportedBatchUpdateCompressors(), repb.Compressor_ZSTD) {
				t.Errorf("supported_batch_update_compressors = %v, want ZSTD", cc.GetSupportedBatchUpdateCompressors())
			}
			if cc.GetMaxBatchTotalSizeBytes() != opts.MaxBatchSize {
				t.Errorf("max_batch_total_size_bytes = %d, want %d", cc.GetMaxBatchTotalSizeBytes(), opts.MaxBatchSize)
			}
			// The advertised batch limit must fit in a gRPC message the
			// server accepts, with room for the framing.
			if max := int64(maxMessageSize()); cc.GetMaxBatchTotalSizeBytes() == 0 || cc.GetMaxBatchTotalSizeBytes() >= max {
				t.Errorf("max_batch_total_size_bytes = %d, but gRPC messages are limited to %d", cc.GetMaxBatchTotalSizeBytes(), max)
			}
			if !cc.GetActionCacheUpdateCapabilities().GetUpdateEnabled() {
				t.Error("action cache updates not enabled")
			}
			ec := caps.ExecutionCapabilities
			if ec.GetExecEnabled() != opts.ExecEnabled {
				t.Errorf("exec_enabled = %v, want %v", ec.GetExecEnabled(), opts.ExecEnabled)
			}
			if ec.GetDigestFunction() != repb.DigestFunction_SHA256 {
				t.Errorf("execution digest_function = %v, want SHA256", ec.GetDigestFunction())
			}
		})
	}
}
