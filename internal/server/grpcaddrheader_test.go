package server

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/config"
)

// TestHTTPPortNamesGRPCAddr: every response of the HTTP port, also one
// refused for want of a token, names the gRPC address in
// X-Gantry-GRPC, for a client that dialled the wrong port to say so.
func TestHTTPPortNamesGRPCAddr(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	pem, err := os.ReadFile(f.ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	for path, code := range map[string]int{"/healthz": http.StatusOK, "/status": http.StatusUnauthorized} {
		resp, err := hc.Get("https://" + f.srv.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code || resp.Header.Get(GRPCAddrHeader) != f.srv.GRPCAddr() {
			t.Errorf("%s: %s, %s %q; want %d and %q", path, resp.Status, GRPCAddrHeader, resp.Header.Get(GRPCAddrHeader), code, f.srv.GRPCAddr())
		}
	}
}
