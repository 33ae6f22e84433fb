package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/auth/authtest"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// secureFarm is a server with TLS (optional client certificates),
// static tokens, JWT keys and a policy.
type secureFarm struct {
	t      *testing.T
	srv    *Server
	cfg    config.Config
	ca     *authtest.CA
	dir    string
	tokens map[string]string // subject -> token file
	hs     []byte
	rsa    any
	ec     any
	stop   func()
	// target is the gRPC address dial connects to ("": srv's).
	target string
}

// perms are the single permissions; identity "p-NAME" holds only NAME,
// on instance "inst" (admin, worker and status on every instance).
var perms = []string{"cas.read", "ac.read", "cas.write", "ac.write", "execute", "admin", "worker", "status", "asset.fetch", "asset.push"}

func startSecureFarm(t *testing.T, mod func(*config.Config)) *secureFarm {
	t.Helper()
	f, cfg := secureFarmConfig(t)
	if mod != nil {
		mod(&cfg)
	}
	f.cfg = cfg
	srv, err := New(cfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	f.stop = func() { cancel(); <-done }
	t.Cleanup(f.stop)
	return f
}

// secureFarmConfig makes the CA, tokens and keys of a secureFarm and its
// configuration.
func secureFarmConfig(t *testing.T) (*secureFarm, config.Config) {
	t.Helper()
	f := &secureFarm{t: t, ca: authtest.NewCA(t, "test"), dir: t.TempDir(), tokens: map[string]string{}}
	var lines []string
	subjects := []string{"alice", "bob", "ci"}
	for _, p := range perms {
		subjects = append(subjects, "p-"+p)
	}
	for _, s := range subjects {
		tok := fmt.Sprintf("%s-secret-token-%d", s, time.Now().UnixNano())
		lines = append(lines, s+" "+tok+map[bool]string{true: " builders", false: ""}[s == "ci"])
		f.tokens[s] = f.write(s+".token", tok)
	}
	tokensFile := f.write("tokens", strings.Join(lines, "\n")+"\n")
	f.hs = []byte("0123456789abcdef0123456789abcdef")
	rk, ek := authtest.RSAKey(t), authtest.ECKey(t)
	f.rsa, f.ec = rk, ek
	cert, key := f.ca.Server()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Worker.Cores = 2
	cfg.Scheduler.HeartbeatInterval = config.Duration(100 * time.Millisecond)
	cfg.Scheduler.HeartbeatTimeout = config.Duration(time.Second)
	cfg.TLS = config.TLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: f.ca.CertFile, ClientAuth: "optional"}
	cfg.Auth.Enabled = true
	cfg.Auth.TokensFile = tokensFile
	cfg.Auth.CertificateNames = []string{"cn", "uri"}
	cfg.Auth.JWT.HS256SecretFile = f.write("hs256", string(f.hs)+"\n")
	cfg.Auth.JWT.PublicKeyFiles = []string{
		authtest.PublicKeyFile(t, f.dir, "rsa.pem", &rk.PublicKey),
		authtest.PublicKeyFile(t, f.dir, "ec.pem", &ek.PublicKey),
	}
	cfg.Auth.JWT.Issuer = "https://idp.test"
	cfg.Auth.Policy = []config.PolicyRule{
		{Identities: []string{"alice"}, Instances: []string{"team-a/*"}, Permissions: []string{"read", "cas.write", "execute"}},
		{Identities: []string{"bob"}, Instances: []string{"team-b/*"}, Permissions: []string{"read", "cas.write", "execute"}},
		{Identities: []string{"group:builders"}, Instances: []string{"*"}, Permissions: []string{"write"}},
		{Identities: []string{"jwt:jwt-user", "cert:cert-reader", "spiffe://test/reader"}, Instances: []string{"inst"}, Permissions: []string{"ac.read"}},
	}
	for _, p := range perms {
		inst := "inst"
		if p == "admin" || p == "worker" || p == "status" {
			inst = "*"
		}
		cfg.Auth.Policy = append(cfg.Auth.Policy, config.PolicyRule{Identities: []string{"token:p-" + p}, Instances: []string{inst}, Permissions: []string{p}})
	}
	return f, cfg
}

func (f *secureFarm) write(name, content string) string {
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// dial connects with TLS (verifying the server) and sec's credentials.
func (f *secureFarm) dial(sec client.Security) *grpc.ClientConn {
	f.t.Helper()
	sec.CAFile = f.ca.CertFile
	target := f.target
	if target == "" {
		target = f.srv.GRPCAddr()
	}
	conn, err := client.DialSecure(target, sec)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return conn
}

func (f *secureFarm) as(subject string) *grpc.ClientConn {
	return f.dial(client.Security{TokenFile: f.tokens[subject]})
}

func (f *secureFarm) jwtConn(m jwt.SigningMethod, key any, claims jwt.MapClaims) *grpc.ClientConn {
	f.t.Helper()
	tok, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.dial(client.Security{TokenFile: f.write(fmt.Sprintf("jwt-%d", time.Now().UnixNano()), tok)})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var emptyDigest = digest.Empty(digest.SHA256)

// calls are one call per permission-checked method group, on instance
// "inst", with the permissions any of which allows it.
var calls = []struct {
	name  string
	perms []string
	call  func(ctx context.Context, conn *grpc.ClientConn) error
}{
	{"GetCapabilities", perms, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := repb.NewCapabilitiesClient(c).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: "inst"})
		return err
	}},
	{"FindMissingBlobs", []string{"cas.read", "cas.write"}, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := repb.NewContentAddressableStorageClient(c).FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{InstanceName: "inst", BlobDigests: []*repb.Digest{emptyDigest.Proto()}})
		return err
	}},
	{"BatchReadBlobs", []string{"cas.read"}, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := repb.NewContentAddressableStorageClient(c).BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{InstanceName: "inst", Digests: []*repb.Digest{emptyDigest.Proto()}})
		return err
	}},
	{"GetTree", []string{"cas.read"}, func(ctx context.Context, c *grpc.ClientConn) error {
		s, err := repb.NewContentAddressableStorageClient(c).GetTree(ctx, &repb.GetTreeRequest{InstanceName: "inst", RootDigest: emptyDigest.Proto()})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}},
	{"ByteStream.Read", []string{"cas.read"}, func(ctx context.Context, c *grpc.ClientConn) error {
		s, err := bytestream.NewByteStreamClient(c).Read(ctx, &bytestream.ReadRequest{ResourceName: "inst/blobs/" + emptyDigest.Hash + "/0"})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}},
	{"BatchUpdateBlobs", []string{"cas.write"}, func(ctx context.Context, c *grpc.ClientConn) error {
		d := digest.Compute(digest.SHA256, []byte("x"))
		_, err := repb.NewContentAddressableStorageClient(c).BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{InstanceName: "inst",
			Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: d.Proto(), Data: []byte("x")}}})
		return err
	}},
	{"ByteStream.Write", []string{"cas.write"}, func(ctx context.Context, c *grpc.ClientConn) error {
		d := digest.Compute(digest.SHA256, []byte("y"))
		s, err := bytestream.NewByteStreamClient(c).Write(ctx)
		if err != nil {
			return err
		}
		s.Send(&bytestream.WriteRequest{ResourceName: "inst/uploads/" + client.NewUUID() + "/blobs/" + d.Hash + "/1", Data: []byte("y"), FinishWrite: true})
		_, err = s.CloseAndRecv()
		return err
	}},
	{"GetActionResult", []string{"ac.read"}, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := repb.NewActionCacheClient(c).GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: "inst", ActionDigest: emptyDigest.Proto()})
		return err
	}},
	{"UpdateActionResult", []string{"ac.write"}, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := repb.NewActionCacheClient(c).UpdateActionResult(ctx, &repb.UpdateActionResultRequest{InstanceName: "inst", ActionDigest: digest.Compute(digest.SHA256, []byte("a")).Proto(), ActionResult: &repb.ActionResult{}})
		return err
	}},
	{"Execute", []string{"execute"}, func(ctx context.Context, c *grpc.ClientConn) error {
		s, err := repb.NewExecutionClient(c).Execute(ctx, &repb.ExecuteRequest{InstanceName: "inst", ActionDigest: digest.Compute(digest.SHA256, []byte("no such action")).Proto(), SkipCacheLookup: true})
		if err != nil {
			return err
		}
		for {
			if _, err := s.Recv(); err != nil {
				return err
			}
		}
	}},
	{"ListQuotas", []string{"admin"}, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := adminpb.NewAdminClient(c).ListQuotas(ctx, &adminpb.ListQuotasRequest{})
		return err
	}},
	{"ListOperations", []string{"admin"}, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := longrunningpb.NewOperationsClient(c).ListOperations(ctx, &longrunningpb.ListOperationsRequest{})
		return err
	}},
	{"FetchBlob", []string{"asset.fetch"}, func(ctx context.Context, c *grpc.ClientConn) error {
		// An unsupported qualifier: INVALID_ARGUMENT once authorized, no download.
		_, err := rapb.NewFetchClient(c).FetchBlob(ctx, &rapb.FetchBlobRequest{InstanceName: "inst", Uris: []string{"https://example.com/x"}, Qualifiers: []*rapb.Qualifier{{Name: "unsupported"}}})
		return err
	}},
	{"PushBlob", []string{"asset.push"}, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := rapb.NewPushClient(c).PushBlob(ctx, &rapb.PushBlobRequest{InstanceName: "inst", Uris: []string{"https://example.com/x"}, BlobDigest: emptyDigest.Proto()})
		return err
	}},
	{"Workers.Register", []string{"worker"}, func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := workerpb.NewWorkersClient(c).Register(ctx, &workerpb.RegisterRequest{WorkerId: "test-worker", Cores: 1, Slots: 1, Instances: []string{"inst"}})
		return err
	}},
}

// TestEachPermission calls each method as each single-permission
// identity: allowed exactly when the identity holds a permission the
// method needs; a denial says which permission, instance and identity.
func TestEachPermission(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx := ctxT(t)
	for _, p := range perms {
		conn := f.as("p-" + p)
		for _, c := range calls {
			allowed := false
			for _, q := range c.perms {
				allowed = allowed || q == p
			}
			err := c.call(ctx, conn)
			code := status.Code(err)
			if allowed && (code == codes.PermissionDenied || code == codes.Unauthenticated) {
				t.Errorf("%s as p-%s: %v, want it allowed", c.name, p, err)
			}
			if !allowed {
				msg := status.Convert(err).Message()
				if code != codes.PermissionDenied || !strings.Contains(msg, "token:p-"+p) || !strings.Contains(msg, "lacks permission") || !strings.Contains(msg, c.perms[0]) {
					t.Errorf("%s as p-%s: %v, want PERMISSION_DENIED naming the identity and %s", c.name, p, err, c.perms[0])
				}
				if !strings.Contains(msg, `instance "inst"`) && !strings.Contains(msg, "every instance") {
					t.Errorf("%s as p-%s: denial %q names no instance", c.name, p, msg)
				}
			}
		}
	}
}

// TestInstanceIsolation: a client of instance team-a cannot read team-b's
// action results or blobs.
func TestInstanceIsolation(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx := ctxT(t)
	alice, bob, ci := f.as("alice"), f.as("bob"), f.as("ci")
	blob := []byte("team-b secret output")
	bd := digest.Compute(digest.SHA256, blob)
	ad := digest.Compute(digest.SHA256, []byte("team-b action"))
	if _, err := repb.NewContentAddressableStorageClient(ci).BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{InstanceName: "team-b/main",
		Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: bd.Proto(), Data: blob}}}); err != nil {
		t.Fatal(err)
	}
	ar := &repb.ActionResult{StdoutDigest: bd.Proto()}
	if _, err := repb.NewActionCacheClient(ci).UpdateActionResult(ctx, &repb.UpdateActionResultRequest{InstanceName: "team-b/main", ActionDigest: ad.Proto(), ActionResult: ar}); err != nil {
		t.Fatal(err)
	}
	get := func(c *grpc.ClientConn) error {
		_, err := repb.NewActionCacheClient(c).GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: "team-b/main", ActionDigest: ad.Proto()})
		return err
	}
	if err := get(bob); err != nil {
		t.Fatalf("bob reading his own instance: %v", err)
	}
	err := get(alice)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `token:alice lacks permission ac.read on instance "team-b/main"`) {
		t.Fatalf("alice reading team-b's action result: %v", err)
	}
	read := func(c *grpc.ClientConn) error {
		s, err := bytestream.NewByteStreamClient(c).Read(ctx, &bytestream.ReadRequest{ResourceName: fmt.Sprintf("team-b/main/blobs/%s/%d", bd.Hash, bd.Size)})
		if err == nil {
			_, err = s.Recv()
		}
		return err
	}
	if err := read(bob); err != nil {
		t.Fatalf("bob reading his blob: %v", err)
	}
	if err := read(alice); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "cas.read") {
		t.Fatalf("alice reading team-b's blob over ByteStream: %v", err)
	}
	_, err = repb.NewContentAddressableStorageClient(alice).BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{InstanceName: "team-b/main", Digests: []*repb.Digest{bd.Proto()}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice batch-reading team-b's blob: %v", err)
	}
	// The same digest on her own instance is hers to read (the CAS is
	// shared by content; the policy scopes names, see OPERATIONS.md).
	_, err = repb.NewActionCacheClient(alice).GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: "team-a/main", ActionDigest: ad.Proto()})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("alice reading the digest on team-a: %v, want NOT_FOUND (action results are per instance)", err)
	}
	// A malformed resource name is a bad request, not a way around the policy.
	s, _ := bytestream.NewByteStreamClient(alice).Read(ctx, &bytestream.ReadRequest{ResourceName: "team-b/main/nonsense"})
	if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("malformed resource name: %v", err)
	}
}

// TestIdentitySources: static tokens, JWTs (HS256, RS256, ES256) and
// client certificates (CN and URI SAN) identify callers; bad ones are
// UNAUTHENTICATED with a reason.
func TestIdentitySources(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx := ctxT(t)
	getAR := func(c *grpc.ClientConn, inst string) error {
		_, err := repb.NewActionCacheClient(c).GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: inst, ActionDigest: emptyDigest.Proto()})
		return err
	}
	exp := time.Now().Add(time.Hour).Unix()
	claims := func(sub string, exp int64) jwt.MapClaims {
		return jwt.MapClaims{"sub": sub, "iss": "https://idp.test", "exp": exp}
	}
	rk, ek := f.rsa, f.ec
	otherEC := authtest.ECKey(t)
	reader, readerKey := f.ca.Issue(authtest.Names{CN: "cert-reader"})
	uriCert, uriKey := f.ca.Issue(authtest.Names{URIs: []string{"spiffe://test/reader"}})
	nobody, nobodyKey := f.ca.Issue(authtest.Names{CN: "nobody"})
	otherCA := authtest.NewCA(t, "other")
	foreign, foreignKey := otherCA.Issue(authtest.Names{CN: "cert-reader"})
	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
		code codes.Code
		want string
	}{
		{"static token", f.as("p-ac.read"), codes.NotFound, ""},
		{"JWT HS256", f.jwtConn(jwt.SigningMethodHS256, f.hs, claims("jwt-user", exp)), codes.NotFound, ""},
		{"JWT RS256", f.jwtConn(jwt.SigningMethodRS256, rk, claims("jwt-user", exp)), codes.NotFound, ""},
		{"JWT ES256", f.jwtConn(jwt.SigningMethodES256, ek, claims("jwt-user", exp)), codes.NotFound, ""},
		{"JWT of a subject without rights", f.jwtConn(jwt.SigningMethodHS256, f.hs, claims("jwt-other", exp)), codes.PermissionDenied, "jwt:jwt-other lacks permission ac.read"},
		{"expired JWT", f.jwtConn(jwt.SigningMethodHS256, f.hs, claims("jwt-user", time.Now().Add(-time.Hour).Unix())), codes.Unauthenticated, "expired"},
		{"JWT with a bad signature", f.jwtConn(jwt.SigningMethodES256, otherEC, claims("jwt-user", exp)), codes.Unauthenticated, "signature does not verify"},
		{"JWT of another issuer", f.jwtConn(jwt.SigningMethodHS256, f.hs, jwt.MapClaims{"sub": "jwt-user", "iss": "evil", "exp": exp}), codes.Unauthenticated, "issuer"},
		{"unknown token", f.dial(client.Security{TokenFile: f.write("unknown", "not-a-known-token-123456")}), codes.Unauthenticated, "not known to this server"},
		{"client certificate CN", f.dial(client.Security{CertFile: reader, KeyFile: readerKey}), codes.NotFound, ""},
		{"client certificate URI", f.dial(client.Security{CertFile: uriCert, KeyFile: uriKey}), codes.NotFound, ""},
		{"client certificate without rights", f.dial(client.Security{CertFile: nobody, KeyFile: nobodyKey}), codes.PermissionDenied, "cert:nobody lacks permission ac.read"},
		{"TLS without credentials", f.dial(client.Security{}), codes.Unauthenticated, "send a bearer token"},
		// The client offers only certificates of the CAs the server names,
		// so a foreign one is never used: the call has no credentials.
		{"certificate of another CA", f.dial(client.Security{CertFile: foreign, KeyFile: foreignKey}), codes.Unauthenticated, "no credentials"},
	} {
		err := getAR(c.conn, "inst")
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%s: %v, want %v containing %q", c.name, err, c.code, c.want)
		}
	}
	// A malformed authorization header.
	mctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Basic dXNlcjpwdw==")
	_, err := repb.NewActionCacheClient(f.dial(client.Security{})).GetActionResult(mctx, &repb.GetActionResultRequest{InstanceName: "inst", ActionDigest: emptyDigest.Proto()})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "Bearer TOKEN") {
		t.Errorf("Basic authorization: %v", err)
	}
}

// TestClientCertificateRequired: with client_auth require, a client
// without a certificate cannot even connect; one with a certificate can.
func TestClientCertificateRequired(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false; c.TLS.ClientAuth = "require" })
	ctx := ctxT(t)
	_, err := repb.NewCapabilitiesClient(f.as("p-cas.read")).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: "inst"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("without a client certificate: %v, want UNAVAILABLE (handshake refused)", err)
	}
	cert, key := f.ca.Issue(authtest.Names{CN: "cert-reader"})
	_, err = repb.NewCapabilitiesClient(f.dial(client.Security{CertFile: cert, KeyFile: key})).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: "inst"})
	if err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
}

// TestEmbeddedWorkerWithTLSAndAuth runs an action end to end: the
// embedded worker keeps working, and another instance's client cannot
// see the operation.
func TestEmbeddedWorkerWithTLSAndAuth(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) {
		c.Auth.Policy = append(c.Auth.Policy,
			config.PolicyRule{Identities: []string{"alice"}, Instances: []string{"team-a/*"}, Permissions: []string{"admin"}},
			config.PolicyRule{Identities: []string{"bob"}, Instances: []string{"team-b/*"}, Permissions: []string{"admin"}})
	})
	ctx := ctxT(t)
	alice := f.as("alice")
	cas := client.NewCAS(alice, "team-a/main", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest { return putMsg(ctx, t, cas, m) }
	root := put(&repb.Directory{})
	cmd := put(shCmd("echo secured > out.txt", "out.txt"))
	ad := put(&repb.Action{CommandDigest: cmd.Proto(), InputRootDigest: root.Proto()})
	resp, name, err := client.Execute(ctx, alice, &repb.ExecuteRequest{InstanceName: "team-a/main", ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Result.GetExitCode() != 0 || len(resp.Result.GetOutputFiles()) != 1 {
		t.Fatalf("result: %v", resp)
	}
	ops := func(c *grpc.ClientConn) error {
		_, err := longrunningpb.NewOperationsClient(c).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: name})
		return err
	}
	if err := ops(alice); err != nil {
		t.Fatalf("alice's own operation: %v", err)
	}
	err = ops(f.as("bob"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), fmt.Sprintf(`instance "team-a/main" (operation %q)`, name)) {
		t.Fatalf("bob reading alice's operation: %v", err)
	}
	ws, err := repb.NewExecutionClient(f.as("bob")).WaitExecution(ctx, &repb.WaitExecutionRequest{Name: name})
	if err == nil {
		_, err = ws.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("bob waiting on alice's operation: %v", err)
	}
	// KillOperation needs admin on the operation's instance, as the status
	// page's Kill button does: alice administers team-a, bob team-b.
	kill := func(c *grpc.ClientConn) (*adminpb.KillOperationResponse, error) {
		return adminpb.NewAdminClient(c).KillOperation(ctx, &adminpb.KillOperationRequest{Name: name, Reason: "test"})
	}
	if resp, err := kill(f.as("alice")); err != nil || !resp.AlreadyDone {
		t.Fatalf("alice (admin on team-a/*) killing her finished operation: %v, %v", resp, err)
	}
	_, err = kill(f.as("bob"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), fmt.Sprintf(`lacks permission admin on instance "team-a/main" (operation %q)`, name)) {
		t.Fatalf("bob (admin on team-b/*) killing alice's operation: %v", err)
	}
	if _, err := kill(f.as("p-admin")); err != nil {
		t.Fatalf("a global admin killing it: %v", err)
	}
}

// TestWorkerRegistrationNeedsPermission: a worker must hold worker on
// every instance it serves.
func TestWorkerRegistrationNeedsPermission(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) {
		c.Worker.Enabled = false
		c.Auth.Policy = append(c.Auth.Policy, config.PolicyRule{Identities: []string{"alice"}, Instances: []string{"team-a/*"}, Permissions: []string{"worker"}})
	})
	ctx := ctxT(t)
	reg := func(c *grpc.ClientConn, insts ...string) error {
		_, err := workerpb.NewWorkersClient(c).Register(ctx, &workerpb.RegisterRequest{WorkerId: "w", Cores: 1, Slots: 1, Instances: insts})
		return err
	}
	if err := reg(f.as("p-admin")); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "lacks permission worker") {
		t.Fatalf("admin registering a worker: %v", err)
	}
	if err := reg(f.as("alice"), "team-a/main"); err != nil {
		t.Fatalf("alice registering for her instance: %v", err)
	}
	if err := reg(f.as("alice"), "team-a/main", "team-b/main"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"team-b/main"`) {
		t.Fatalf("alice registering for team-b: %v", err)
	}
	if err := reg(f.as("alice")); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "every instance") {
		t.Fatalf("alice registering for every instance: %v", err)
	}
	_, err := workerpb.NewWorkersClient(f.as("p-cas.read")).Poll(ctx, &workerpb.PollRequest{WorkerId: "w"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a reader polling for work: %v", err)
	}
}

// TestHTTPPortRequiresToken: the HTTP port is TLS, needs the status
// permission, and leaves /healthz open.
func TestHTTPPortRequiresToken(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	get := func(path, subject string) (int, string) { return f.httpsGet(f.srv.HTTPAddr(), path, subject) }
	if code, _ := get("/healthz", ""); code != 200 {
		t.Errorf("/healthz without a token: %d", code)
	}
	if code, body := get("/metrics", ""); code != 401 || !strings.Contains(body, "Authorization header") {
		t.Errorf("/metrics without a token: %d %s", code, body)
	}
	if code, body := get("/metrics", "alice"); code != 403 || !strings.Contains(body, "lacks permission status") {
		t.Errorf("/metrics as alice: %d %s", code, body)
	}
	if code, body := get("/metrics", "p-status"); code != 200 || !strings.Contains(body, "gantry_") {
		t.Errorf("/metrics as p-status: %d %.100s", code, body)
	}
	if _, err := http.Get("http://" + f.srv.HTTPAddr() + "/healthz"); err == nil {
		// A plain-text request gets a TLS alert or a 400, never the page.
		resp, _ := http.Get("http://" + f.srv.HTTPAddr() + "/metrics")
		if resp != nil && resp.StatusCode == 200 {
			t.Error("plain HTTP served /metrics")
		}
	}
}

// httpsGet GETs path on the HTTPS port addr, verifying it with the
// farm's CA, with subject's token ("": none) and the client certificate
// certKey (file and key file), if given.
func (f *secureFarm) httpsGet(addr, path, subject string, certKey ...string) (int, string) {
	f.t.Helper()
	pem, _ := os.ReadFile(f.ca.CertFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tc := &tls.Config{RootCAs: pool}
	if len(certKey) == 2 {
		cert, err := tls.LoadX509KeyPair(certKey[0], certKey[1])
		if err != nil {
			f.t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
	if subject != "" {
		tok, _ := os.ReadFile(f.tokens[subject])
		req.Header.Set("Authorization", "Bearer "+string(tok))
	}
	resp, err := hc.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEveryMethodIsMapped: every gRPC method the server serves has a
// permission; an unmapped one would be denied.
func TestEveryMethodIsMapped(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	n := 0
	for svc, info := range f.srv.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			n++
			if full := "/" + svc + "/" + m.Name; !auth.Mapped(full) {
				t.Errorf("%s has no permission mapping in internal/auth/methods.go", full)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d methods found", n)
	}
	if auth.Mapped("/some.Unknown/Method") {
		t.Fatal("an unknown method is mapped")
	}
}

// TestReloadTokensAndPolicy: Reload picks up a new tokens file and policy.
func TestReloadTokensAndPolicy(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx := ctxT(t)
	caps := func(c *grpc.ClientConn) error {
		_, err := repb.NewCapabilitiesClient(c).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: "inst"})
		return err
	}
	if err := caps(f.as("p-cas.read")); err != nil {
		t.Fatal(err)
	}
	cfg := f.cfg
	cfg.Auth.TokensFile = f.write("tokens2", "carol carol-token-0123456789\n")
	cfg.Auth.Policy = []config.PolicyRule{{Identities: []string{"carol"}, Instances: []string{"inst"}, Permissions: []string{"read"}}}
	if err := f.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if err := caps(f.as("p-cas.read")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a removed token after reload: %v", err)
	}
	if err := caps(f.dial(client.Security{TokenFile: f.write("carol.token", "carol-token-0123456789")})); err != nil {
		t.Fatalf("a new token after reload: %v", err)
	}
	cfg.Auth.Policy[0].Permissions = []string{"raed"}
	if err := f.srv.Reload(cfg); err == nil || !strings.Contains(err.Error(), `auth.policy[0].permissions[0]: unknown permission "raed"`) {
		t.Fatalf("a bad policy on reload: %v", err)
	}
}

// TestAuthenticatedUserIsTheFairnessKey: with auth on, the user key is
// the caller's identity, not the (spoofable) header.
func TestAuthenticatedUserIsTheFairnessKey(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) {
		c.Worker.Enabled = false
		c.Scheduler.Fairness.Keys = []string{"user"}
	})
	ctx := ctxT(t)
	alice := f.as("alice")
	cas := client.NewCAS(alice, "team-a/main", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest { return putMsg(ctx, t, cas, m) }
	ad := put(&repb.Action{CommandDigest: put(shCmd("true")).Proto(), InputRootDigest: put(&repb.Directory{}).Proto()})
	ectx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, "x-gantry-user", "mallory"))
	defer cancel()
	s, err := repb.NewExecutionClient(alice).Execute(ectx, &repb.ExecuteRequest{InstanceName: "team-a/main", ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	admin := adminpb.NewAdminClient(f.as("p-admin"))
	for i := 0; ; i++ {
		resp, err := admin.ListInvocations(ctx, &adminpb.ListInvocationsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, inv := range resp.Invocations {
			if len(inv.Path) > 0 {
				paths = append(paths, strings.Join(inv.Path, "/"))
			}
		}
		if len(paths) > 0 {
			if strings.Join(paths, ",") != "alice" {
				t.Fatalf("invocation paths %v, want [alice]", paths)
			}
			return
		}
		if i == 200 {
			t.Fatal("the action never showed up in ListInvocations")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTLSWithoutAuth: TLS alone keeps everything allowed, refuses plain
// text, and the embedded worker still runs actions.
func TestTLSWithoutAuth(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) {
		c.Auth = config.Default().Auth
		c.TLS.ClientCAFile, c.TLS.ClientAuth = "", ""
	})
	ctx := ctxT(t)
	plain, err := client.Dial(f.srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := repb.NewCapabilitiesClient(plain).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("plain text to a TLS port: %v", err)
	}
	conn := f.dial(client.Security{})
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest { return putMsg(ctx, t, cas, m) }
	ad := put(&repb.Action{CommandDigest: put(shCmd("echo tls > out.txt", "out.txt")).Proto(), InputRootDigest: put(&repb.Directory{}).Proto()})
	resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil || resp.Result.GetExitCode() != 0 || len(resp.Result.GetOutputFiles()) != 1 {
		t.Fatalf("execute over TLS: %v %v", resp, err)
	}
}

// BenchmarkAuthOverhead: FindMissingBlobs round trips over loopback
// (plain text) with auth off and with a static token and a policy.
func BenchmarkAuthOverhead(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "auth-off", true: "token"}[on], func(b *testing.B) {
			dir := b.TempDir()
			cfg := config.Default()
			cfg.Listen, cfg.HTTPListen, cfg.DataDir, cfg.Worker.Enabled = "127.0.0.1:0", "", dir, false
			sec := client.Security{}
			if on {
				tf := filepath.Join(dir, "tokens")
				os.WriteFile(tf, []byte("bench bench-token-0123456789\n"), 0o600)
				sec.TokenFile = filepath.Join(dir, "bench.token")
				os.WriteFile(sec.TokenFile, []byte("bench-token-0123456789"), 0o600)
				cfg.Auth.Enabled, cfg.Auth.TokensFile = true, tf
				cfg.Auth.Policy = []config.PolicyRule{{Identities: []string{"bench"}, Instances: []string{"main"}, Permissions: []string{"read"}}}
			}
			srv, err := New(cfg, quietLogger())
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { srv.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			conn, err := client.DialSecure(srv.GRPCAddr(), sec)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			cas := repb.NewContentAddressableStorageClient(conn)
			req := &repb.FindMissingBlobsRequest{InstanceName: "main", BlobDigests: []*repb.Digest{emptyDigest.Proto()}}
			b.ResetTimer()
			for b.Loop() {
				if _, err := cas.FindMissingBlobs(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAnonymousAccess: with allow_anonymous, callers without credentials
// get what the policy grants "anonymous" and no more; bad credentials are
// still refused.
func TestAnonymousAccess(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) {
		c.Worker.Enabled = false
		c.Auth.AllowAnonymous = true
		c.Auth.Policy = append(c.Auth.Policy, config.PolicyRule{Identities: []string{"anonymous"}, Instances: []string{"public"}, Permissions: []string{"ac.read"}})
	})
	ctx := ctxT(t)
	get := func(c *grpc.ClientConn, inst string) error {
		_, err := repb.NewActionCacheClient(c).GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: inst, ActionDigest: emptyDigest.Proto()})
		return err
	}
	anon := f.dial(client.Security{})
	if err := get(anon, "public"); status.Code(err) != codes.NotFound {
		t.Fatalf("anonymous on public: %v, want NOT_FOUND (allowed)", err)
	}
	if err := get(anon, "inst"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "anonymous (no credentials) lacks permission ac.read") {
		t.Fatalf("anonymous on inst: %v", err)
	}
	if err := get(f.dial(client.Security{TokenFile: f.write("bad", "bad-token-0123456789abc")}), "public"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a bad token with anonymous allowed: %v", err)
	}
}

// TestWorkerIDBoundToIdentity: one worker identity cannot poll or
// register as a worker another identity registered.
func TestWorkerIDBoundToIdentity(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) {
		c.Worker.Enabled = false
		c.Auth.Policy = append(c.Auth.Policy, config.PolicyRule{Identities: []string{"bob"}, Instances: []string{"*"}, Permissions: []string{"worker"}})
	})
	ctx := ctxT(t)
	owner, other := workerpb.NewWorkersClient(f.as("p-worker")), workerpb.NewWorkersClient(f.as("bob"))
	reg := func(c workerpb.WorkersClient, id string) error {
		_, err := c.Register(ctx, &workerpb.RegisterRequest{WorkerId: id, Cores: 1, Slots: 1})
		return err
	}
	poll := func(c workerpb.WorkersClient, id string) error {
		_, err := c.Poll(ctx, &workerpb.PollRequest{WorkerId: id, WaitMs: 1})
		return err
	}
	if err := reg(owner, "w1"); err != nil {
		t.Fatal(err)
	}
	if err := poll(owner, "w1"); err != nil {
		t.Fatalf("the owner polling: %v", err)
	}
	if err := poll(other, "w1"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `worker id "w1" was registered by token:p-worker, not token:bob`) {
		t.Fatalf("bob polling as w1: %v", err)
	}
	if err := reg(other, "w1"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("bob registering w1: %v", err)
	}
	if err := reg(other, "w2"); err != nil {
		t.Fatalf("bob registering his own worker: %v", err)
	}
	if err := poll(other, "w2"); err != nil {
		t.Fatalf("bob polling his own worker: %v", err)
	}
	// The Session stream too: ending another worker's session would lose
	// its leases.
	session := func(c workerpb.WorkersClient, id string) error {
		st, err := c.Session(ctx, &workerpb.SessionRequest{WorkerId: id})
		if err == nil {
			_, err = st.Recv()
		}
		return err
	}
	if err := session(other, "w1"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `worker id "w1" was registered by token:p-worker, not token:bob`) {
		t.Fatalf("bob opening a session as w1: %v", err)
	}
	if err := session(other, "w2"); err != nil {
		t.Fatalf("bob opening a session of his own worker: %v", err)
	}
}
