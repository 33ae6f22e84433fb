package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/auth/authtest"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// secureCluster is a frontend and a scheduler with the secure farm's
// TLS, tokens, JWT keys and policy, connected to each other by mutual
// TLS: the frontend as cert:frontend-1 (trusted to forward callers),
// the scheduler as cert:scheduler-1 (allowed to read and write the
// frontend's CAS and action cache).
type secureCluster struct {
	*secureFarm
	fe    *Server
	sched *Server
	// the scheduler's configuration (the frontend's is cfg)
	scfg config.Config
	// node certificates
	feCert, feKey, scCert, scKey string
}

func startSecureCluster(t *testing.T, feMod func(*config.Config)) *secureCluster {
	t.Helper()
	dsn := pgtest.Start(t)
	f, base := secureFarmConfig(t)
	c := &secureCluster{secureFarm: f}
	c.feCert, c.feKey = f.ca.Issue(authtest.Names{CN: "frontend-1", DNS: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	c.scCert, c.scKey = f.ca.Issue(authtest.Names{CN: "scheduler-1", DNS: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	secured := func(role, cert, key string) config.Config {
		cfg := clusterConfig(t, role, dsn)
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.TLS = base.TLS
		cfg.TLS.CertFile, cfg.TLS.KeyFile = cert, key
		cfg.Auth = base.Auth
		// Every node has the same auth section; the scheduler node reads
		// and writes the frontend's CAS and action cache.
		cfg.Auth.Policy = append(append([]config.PolicyRule(nil), base.Auth.Policy...),
			config.PolicyRule{Identities: []string{"cert:scheduler-1"}, Instances: []string{"*"}, Permissions: []string{"read", "write"}})
		cfg.Cluster.Client = config.ClientConfig{TLSCAFile: f.ca.CertFile, TLSCertFile: cert, TLSKeyFile: key}
		return cfg
	}
	fcfg := secured(config.RoleFrontend, c.feCert, c.feKey)
	if feMod != nil {
		feMod(&fcfg)
	}
	fe, err := newFrontendNode(fcfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, fe)
	scfg := secured(config.RoleScheduler, c.scCert, c.scKey)
	scfg.TLS.ClientAuth = "require" // only nodes connect here
	scfg.Cluster.CAS = fe.GRPCAddr()
	scfg.Cluster.FrontendIdentities = []string{"cert:frontend-1"}
	s, err := newSchedulerNode(scfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, s)
	clusterWaitFor(t, "the scheduler to lead", s.Leading)
	c.fe, c.sched, c.scfg = fe, s, scfg
	f.target = fe.GRPCAddr()
	f.cfg = fcfg
	return c
}

// TestClusterTLSAndAuth: a frontend and a scheduler with TLS, mutual TLS
// between them, tokens and a policy. Through the frontend, every method
// is allowed exactly to the identities holding its permission (the
// frontend authorizes its own services; the scheduler the forwarded
// ones, for the caller the frontend names); an action runs end to end on
// the frontend's embedded worker; a caller cannot pose as another
// through the forwarded caller header. The scheduler's port refuses
// plain text, clients without a certificate, and non-frontends that
// claim to forward; both HTTP ports are TLS and, with auth.enabled and
// nothing else said, need the status permission (the profiler admin).
func TestClusterTLSAndAuth(t *testing.T) {
	c := startSecureCluster(t, func(cfg *config.Config) {
		cfg.Worker.Enabled = true
		cfg.Worker.Cores = 1
		cfg.Worker.ID = "fe-embedded"
	})
	ctx := ctxT(t)

	// No credentials at all, or plain text: refused at the frontend.
	anon := c.dial(client.Security{})
	if _, err := repb.NewContentAddressableStorageClient(anon).FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{InstanceName: "inst"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("FindMissingBlobs without credentials: %v, want UNAUTHENTICATED", err)
	}
	if err := executeErr(ctx, anon, "inst", emptyDigest); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Execute without credentials: %v, want UNAUTHENTICATED", err)
	}
	plain, err := client.Dial(c.fe.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := repb.NewCapabilitiesClient(plain).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plain text to the frontend: %v, want UNAVAILABLE", err)
	}

	// Each single-permission identity, each method, through the frontend.
	for _, p := range perms {
		conn := c.as("p-" + p)
		for _, call := range calls {
			allowed := false
			for _, q := range call.perms {
				allowed = allowed || q == p
			}
			err := call.call(ctx, conn)
			code := status.Code(err)
			if allowed && (code == codes.PermissionDenied || code == codes.Unauthenticated || code == codes.Internal) {
				t.Errorf("%s as p-%s through the frontend: %v, want it allowed", call.name, p, err)
			}
			if !allowed {
				msg := status.Convert(err).Message()
				if code != codes.PermissionDenied || !strings.Contains(msg, "token:p-"+p+" lacks permission") || !strings.Contains(msg, call.perms[0]) {
					t.Errorf("%s as p-%s through the frontend: %v, want PERMISSION_DENIED naming the identity and %s", call.name, p, err, call.perms[0])
				}
			}
		}
	}

	// alice runs an action on the frontend's embedded worker.
	alice := c.as("alice")
	cas := client.NewCAS(alice, "team-a/main", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest { return putMsg(ctx, t, cas, m) }
	root := put(&repb.Directory{})
	ad := put(&repb.Action{CommandDigest: put(shCmd("echo clustered > out.txt", "out.txt")).Proto(), InputRootDigest: root.Proto()})
	resp, name, err := client.Execute(ctx, alice, &repb.ExecuteRequest{InstanceName: "team-a/main", ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatalf("alice's Execute through the frontend: %v", err)
	}
	if err := client.CheckResponse(resp); err != nil || len(resp.Result.OutputFiles) != 1 {
		t.Fatalf("alice's action: %v %v", resp, err)
	}
	od, _ := digest.FromProto(digest.SHA256, resp.Result.OutputFiles[0].Digest)
	if out, err := blobstore.Get(ctx, cas, od); err != nil || string(out) != "clustered\n" {
		t.Fatalf("alice's output: %q %v", out, err)
	}
	if _, err := repb.NewActionCacheClient(alice).GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: "team-a/main", ActionDigest: ad.Proto()}); err != nil {
		t.Errorf("alice's cached result (written by the scheduler into the frontend's cache): %v", err)
	}
	getOp := func(conn *grpc.ClientConn, ctx context.Context) error {
		_, err := longrunningpb.NewOperationsClient(conn).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: name})
		return err
	}
	if err := getOp(alice, ctx); err != nil {
		t.Errorf("alice's own operation: %v", err)
	}
	// The frontend's own streaming services check the instance.
	rs, err := bytestream.NewByteStreamClient(alice).Read(ctx, &bytestream.ReadRequest{ResourceName: "team-b/main/blobs/" + od.Hash + "/" + fmt.Sprint(od.Size)})
	if err == nil {
		_, err = rs.Recv()
	}
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `token:alice lacks permission cas.read on instance "team-b/main"`) {
		t.Errorf("alice reading through team-b's ByteStream: %v, want PERMISSION_DENIED", err)
	}
	bob := c.as("bob")
	if err := getOp(bob, ctx); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), fmt.Sprintf(`token:bob lacks permission execute on instance "team-a/main" (operation %q)`, name)) {
		t.Errorf("bob reading alice's operation: %v, want PERMISSION_DENIED from the scheduler naming bob and the operation's instance", err)
	}
	if err := executeErr(ctx, bob, "team-a/main", ad); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "token:bob") {
		t.Errorf("bob executing on team-a: %v, want PERMISSION_DENIED", err)
	}
	// bob claiming, in the forwarded caller header, to be the frontend's
	// internal identity (which may do anything): still bob.
	forged := metadata.AppendToOutgoingContext(ctx, auth.ForwardedCallerHeader, auth.EncodeForwarded(auth.Internal))
	if err := getOp(bob, forged); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "token:bob") {
		t.Errorf("bob with a forged forwarded caller: %v, want PERMISSION_DENIED for bob", err)
	}

	// The scheduler's port: plain text, TLS without a certificate.
	sched := c.sched.GRPCAddr()
	splain, err := client.Dial(sched)
	if err != nil {
		t.Fatal(err)
	}
	defer splain.Close()
	if _, err := healthpb.NewHealthClient(splain).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plain text to the scheduler: %v, want UNAVAILABLE", err)
	}
	dialSched := func(sec client.Security) *grpc.ClientConn {
		sec.CAFile = c.ca.CertFile
		conn, err := client.DialSecure(sched, sec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	if err := getOp(dialSched(client.Security{TokenFile: c.tokens["p-admin"]}), ctx); status.Code(err) != codes.Unavailable {
		t.Errorf("a token without a client certificate at the scheduler: %v, want UNAVAILABLE (handshake refused)", err)
	}
	// A certificate of the CA, not a frontend's, forwarding: refused.
	wc, wk := c.ca.Issue(authtest.Names{CN: "cert-reader"})
	stranger := dialSched(client.Security{CertFile: wc, KeyFile: wk})
	if _, err := healthpb.NewHealthClient(stranger).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health at the scheduler with a client certificate: %v", err)
	}
	if err := getOp(stranger, metadata.AppendToOutgoingContext(ctx, auth.ForwardedCallerHeader, auth.EncodeForwarded(&auth.Identity{Subject: "alice", Source: auth.SourceToken}))); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not one of the frontends this scheduler trusts") {
		t.Errorf("a non-frontend forwarding at the scheduler: %v, want PERMISSION_DENIED", err)
	}
	if err := getOp(stranger, ctx); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "cert:cert-reader lacks permission execute") {
		t.Errorf("a non-frontend at the scheduler: %v, want PERMISSION_DENIED for itself", err)
	}
	// The frontend's own certificate without a forwarded caller.
	if err := getOp(dialSched(client.Security{CertFile: c.feCert, KeyFile: c.feKey}), ctx); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "without its caller's identity") {
		t.Errorf("the frontend's certificate without a caller at the scheduler: %v, want PERMISSION_DENIED", err)
	}
	// A worker registering through the frontend with a certificate the
	// policy does not make a worker: refused, by name.
	if _, err := workerpb.NewWorkersClient(c.dial(client.Security{CertFile: wc, KeyFile: wk})).Register(ctx, &workerpb.RegisterRequest{WorkerId: "intruder", Cores: 1, Slots: 1}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "cert:cert-reader lacks permission worker") {
		t.Errorf("a certificate without the worker permission registering through the frontend: %v", err)
	}

	// Both HTTP ports: TLS, /healthz open, /metrics needs status. The
	// scheduler's, like its gRPC port, also needs a client certificate.
	hc, hk := c.ca.Issue(authtest.Names{CN: "prometheus"})
	for _, n := range []struct {
		name, addr string
		cert       []string
		// anonymous is the answer without a token: 401, or 403 for
		// the certificate's identity (cert:prometheus holds nothing).
		anonymous int
	}{{"frontend", c.fe.HTTPAddr(), nil, http.StatusUnauthorized}, {"scheduler", c.sched.HTTPAddr(), []string{hc, hk}, http.StatusForbidden}} {
		if code, body := c.httpsGet(n.addr, "/healthz", "", n.cert...); code != 200 || !strings.HasPrefix(body, "ok") {
			t.Errorf("%s /healthz: %d %s", n.name, code, body)
		}
		if code, _ := c.httpsGet(n.addr, "/metrics", "", n.cert...); code != n.anonymous {
			t.Errorf("%s /metrics without a token: %d, want %d", n.name, code, n.anonymous)
		}
		if code, _ := c.httpsGet(n.addr, "/metrics", "alice", n.cert...); code != http.StatusForbidden {
			t.Errorf("%s /metrics as alice: %d, want 403", n.name, code)
		}
		if code, body := c.httpsGet(n.addr, "/metrics", "p-status", n.cert...); code != 200 || !strings.Contains(body, "gantry_grpc_requests_total") {
			t.Errorf("%s /metrics as p-status: %d %.100s", n.name, code, body)
		}
		// auth.enabled alone closes the rest of the port too, and the
		// profiler needs admin besides status.
		for _, path := range []string{"/status", "/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
			if code, body := c.httpsGet(n.addr, path, "", n.cert...); code != n.anonymous {
				t.Errorf("%s %s without a token: %d, want %d: %.200s", n.name, path, code, n.anonymous, body)
			}
		}
		if code, body := c.httpsGet(n.addr, "/debug/pprof/goroutine?debug=2", "p-status", n.cert...); code != http.StatusForbidden || !strings.Contains(body, "token:p-status lacks permission admin") {
			t.Errorf("%s /debug/pprof/ as p-status: %d, want 403 for lacking admin: %.200s", n.name, code, body)
		}
		if n.cert != nil {
			if _, err := c.httpsClientErr(n.addr); err == nil || !strings.Contains(err.Error(), "certificate required") {
				t.Errorf("%s HTTP port without a client certificate: %v, want the handshake refused", n.name, err)
			}
		}
		if resp, err := http.Get("http://" + n.addr + "/metrics"); err == nil {
			if resp.StatusCode == 200 {
				t.Errorf("%s served /metrics over plain HTTP", n.name)
			}
			resp.Body.Close()
		}
	}
}

// httpsClientErr GETs /healthz on addr with TLS but no client
// certificate.
func (c *secureCluster) httpsClientErr(addr string) (int, error) {
	pem, _ := os.ReadFile(c.ca.CertFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/healthz")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestClusterReloadAuth: SIGHUP's Reload re-reads the tokens and the
// policy on both roles; a caller the frontend knows but the scheduler
// does not (yet) is authenticated by the frontend and denied by the
// scheduler.
func TestClusterReloadAuth(t *testing.T) {
	c := startSecureCluster(t, nil)
	ctx := ctxT(t)
	tok := "carol-secret-token-0123456789"
	lines, err := os.ReadFile(c.cfg.Auth.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	c.tokens["carol"] = c.write("carol.token", tok)
	with := func(cfg config.Config) config.Config {
		cfg.Auth.TokensFile = c.write("tokens2", string(lines)+"carol "+tok+"\n")
		cfg.Auth.Policy = append(append([]config.PolicyRule(nil), cfg.Auth.Policy...),
			config.PolicyRule{Identities: []string{"token:carol"}, Instances: []string{"inst"}, Permissions: []string{"execute"}})
		return cfg
	}
	carol := c.as("carol")
	if err := executeErr(ctx, carol, "inst", emptyDigest); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("carol before any reload: %v, want UNAUTHENTICATED", err)
	}
	if err := c.fe.Reload(with(c.cfg)); err != nil {
		t.Fatal(err)
	}
	if err := executeErr(ctx, carol, "inst", emptyDigest); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `token:carol lacks permission execute on instance "inst"`) {
		t.Fatalf("carol after the frontend's reload: %v, want the scheduler's PERMISSION_DENIED", err)
	}
	if err := c.sched.Reload(with(c.scfg)); err != nil {
		t.Fatal(err)
	}
	// The empty blob is no action: the scheduler's INVALID_ARGUMENT
	// shows that carol was let through.
	if err := executeErr(ctx, carol, "inst", emptyDigest); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("carol after both reloads: %v, want INVALID_ARGUMENT for the empty action", err)
	}
	bad := with(c.scfg)
	bad.Cluster.FrontendIdentities = []string{"group:"}
	if err := c.sched.Reload(bad); err == nil || !strings.Contains(err.Error(), "cluster.frontend_identities[0]") {
		t.Errorf("reloading a bad frontend identity: %v, want an error naming the key", err)
	}
}

// executeErr runs Execute of ad on instance to its end and returns its
// error.
func executeErr(ctx context.Context, conn *grpc.ClientConn, instance string, ad digest.Digest) error {
	s, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{InstanceName: instance, ActionDigest: ad.Proto(), SkipCacheLookup: true})
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
}

// TestClusterAuthMismatch: a scheduler without auth refuses the calls a
// frontend with auth forwards (it would not authorize them), and a
// frontend whose credentials the scheduler refuses reports a
// configuration problem, not the caller's.
func TestClusterAuthMismatch(t *testing.T) {
	dsn := pgtest.Start(t)
	f, base := secureFarmConfig(t)
	feCert, feKey := f.ca.Issue(authtest.Names{CN: "frontend-1", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	fcfg := clusterConfig(t, config.RoleFrontend, dsn)
	fcfg.TLS = base.TLS
	fcfg.TLS.CertFile, fcfg.TLS.KeyFile = feCert, feKey
	fcfg.Auth = base.Auth
	fcfg.Cluster.Client = config.ClientConfig{TLSCAFile: f.ca.CertFile, TLSCertFile: feCert, TLSKeyFile: feKey}
	fe, err := newFrontendNode(fcfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	fe.forwarder().leaders.wait = 300 * time.Millisecond
	runNode(t, fe)
	f.target = fe.GRPCAddr()
	// A scheduler with TLS (it must accept the frontend's connection) but
	// auth off.
	scCert, scKey := f.ca.Issue(authtest.Names{CN: "scheduler-1", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	scfg := clusterConfig(t, config.RoleScheduler, dsn)
	scfg.TLS = config.TLSConfig{CertFile: scCert, KeyFile: scKey}
	scfg.Cluster.CAS = fe.GRPCAddr()
	scfg.Cluster.Client = config.ClientConfig{TLSCAFile: f.ca.CertFile, TLSCertFile: scCert, TLSKeyFile: scKey}
	s, err := newSchedulerNode(scfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	r := runNode(t, s)
	clusterWaitFor(t, "the scheduler to lead", s.Leading)
	ctx := ctxT(t)
	var err2 error
	clusterWaitFor(t, "the frontend to reach the leader", func() bool {
		err2 = executeErr(ctx, f.as("p-execute"), "inst", emptyDigest)
		return status.Code(err2) != codes.Unavailable
	})
	if status.Code(err2) != codes.FailedPrecondition || !strings.Contains(err2.Error(), "auth.enabled: false") {
		t.Fatalf("a forwarded call at a scheduler without auth: %v, want FAILED_PRECONDITION saying so", err2)
	}
	r.stop()
	<-r.done

	// A scheduler with auth that does not trust this frontend's
	// certificate name... and one that cannot authenticate it at all.
	scfg.Auth = base.Auth
	scfg.TLS = base.TLS
	scfg.TLS.CertFile, scfg.TLS.KeyFile = scCert, scKey
	scfg.Cluster.FrontendIdentities = []string{"cert:some-other-frontend"}
	scfg.Auth.CertificateNames = []string{"email"} // the frontend's certificate has none
	s, err = newSchedulerNode(scfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, s)
	clusterWaitFor(t, "the second scheduler to lead", s.Leading)
	clusterWaitFor(t, "the frontend to reach the second leader", func() bool {
		err2 = executeErr(ctx, f.as("p-execute"), "inst", emptyDigest)
		return status.Code(err2) != codes.Unavailable
	})
	if status.Code(err2) != codes.Internal || !strings.Contains(err2.Error(), "refused this frontend's credentials") {
		t.Fatalf("a scheduler that cannot authenticate the frontend: %v, want INTERNAL blaming the cluster's configuration", err2)
	}
}

// TestClusterClientFilesChecked: a node whose cluster.client files are
// unusable stops at start, naming the key.
func TestClusterClientFilesChecked(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		client config.ClientConfig
		want   string
	}{
		{config.ClientConfig{TLSCAFile: filepath.Join(dir, "missing.pem")}, "cluster.client.tls_ca_file: open"},
		{config.ClientConfig{TLSCAFile: empty}, "cluster.client.tls_ca_file: " + empty + " holds no PEM certificate"},
		{config.ClientConfig{TLSCertFile: empty, TLSKeyFile: empty}, "cluster.client.tls_cert_file, tls_key_file:"},
		{config.ClientConfig{TokenFile: empty}, "cluster.client.token_file: " + empty + " must hold exactly one token"},
	} {
		for _, role := range []string{config.RoleFrontend, config.RoleScheduler} {
			cfg := clusterConfig(t, role, "postgres://127.0.0.1:1/none")
			cfg.Cluster.CAS = "127.0.0.1:1"
			cfg.Cluster.Client = c.client
			var err error
			if role == config.RoleFrontend {
				_, err = newFrontendNode(cfg, quietLogger())
			} else {
				_, err = newSchedulerNode(cfg, quietLogger())
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s with cluster.client %+v: %v, want an error containing %q", role, c.client, err, c.want)
			}
		}
	}
}

// TestFrontendCannotDialLeader: when the frontend cannot even connect
// to the published leader (here: it would send its token in plain text
// to another host), forwarded calls say so, not that no scheduler leads.
func TestFrontendCannotDialLeader(t *testing.T) {
	dsn := pgtest.Start(t)
	fcfg := clusterConfig(t, config.RoleFrontend, dsn)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("frontend-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fcfg.Cluster.Client.TokenFile = tok
	fe, err := newFrontendNode(fcfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	fe.forwarder().leaders.wait = 300 * time.Millisecond
	runNode(t, fe)
	scfg := clusterConfig(t, config.RoleScheduler, dsn)
	scfg.Cluster.CAS = fe.GRPCAddr()
	scfg.Cluster.Advertise = "192.0.2.1:8980" // TEST-NET-1: never dialled
	s, err := newSchedulerNode(scfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, s)
	clusterWaitFor(t, "the scheduler to lead", s.Leading)
	ctx := ctxT(t)
	var last error
	clusterWaitFor(t, "the frontend to report the unusable leader", func() bool {
		last = executeErr(ctx, mustDial(t, fe.GRPCAddr()), "", emptyDigest)
		return strings.Contains(status.Convert(last).Message(), "192.0.2.1:8980")
	})
	if st := status.Convert(last); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "cannot connect to the published scheduler leader") || !strings.Contains(st.Message(), "plain text") || !strings.Contains(st.Message(), "cluster.client") {
		t.Fatalf("Execute with an unusable leader: %v, want UNAVAILABLE naming the leader, the reason and cluster.client", last)
	}
}
