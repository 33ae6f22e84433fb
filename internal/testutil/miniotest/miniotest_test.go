//go:build linux

package miniotest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// TestServer: a started server serves S3 with its credentials and not
// without them; an object survives Stop and Restart, and Kill and Restart
// (same data directory, same endpoint); while stopped, calls fail.
func TestServer(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") {
		t.Errorf("Endpoint %q, want http://127.0.0.1:PORT", s.Endpoint)
	}
	env := strings.Join(s.Env(), "\n")
	if !strings.Contains(env, "AWS_ACCESS_KEY_ID="+s.AccessKey) || !strings.Contains(env, "AWS_SECRET_ACCESS_KEY="+s.SecretKey) {
		t.Errorf("Env() = %q, want the AWS_* variables with the server's credentials", s.Env())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	bucket := s.Bucket(t)
	other := s.Bucket(t)
	if bucket == other {
		t.Fatalf("two calls of Bucket returned the same bucket %q", bucket)
	}
	want := []byte("hello from miniotest")
	if _, err := s.Client().PutObject(ctx, bucket, "k", bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	check := func(when string) {
		t.Helper()
		obj, err := s.Client().GetObject(ctx, bucket, "k", minio.GetObjectOptions{})
		if err != nil {
			t.Fatalf("%s: GetObject: %v", when, err)
		}
		defer obj.Close()
		got, err := io.ReadAll(obj)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: object = %q, %v; want %q", when, got, err, want)
		}
	}
	check("after PutObject")

	// Wrong credentials are refused: the server checks them.
	wrong := &Server{AccessKey: s.AccessKey, SecretKey: s.SecretKey + "x", addr: s.addr}
	wc, err := wrong.newClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.ListBuckets(ctx); err == nil {
		t.Errorf("ListBuckets with a wrong secret key succeeded")
	}

	s.Stop()
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = s.Client().ListBuckets(sctx)
	scancel()
	if err == nil {
		t.Errorf("ListBuckets succeeded while the server was stopped")
	}
	s.Restart()
	check("after Stop and Restart")

	s.Kill()
	s.Restart()
	check("after Kill and Restart")
}
