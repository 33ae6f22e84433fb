package server

import "net/http"

// GRPCAddrHeader is set on every response of the HTTP port to the bound
// gRPC address (host:port, the host possibly a wildcard such as
// 0.0.0.0), so that a client pointed at the HTTP port by mistake can
// tell its user which address to use instead.
const GRPCAddrHeader = "X-Gantry-GRPC"

// withGRPCAddr sets GRPCAddrHeader to grpcAddr on every response of h,
// before any check of h can refuse the request.
func withGRPCAddr(h http.Handler, grpcAddr string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(GRPCAddrHeader, grpcAddr)
		h.ServeHTTP(w, r)
	})
}
