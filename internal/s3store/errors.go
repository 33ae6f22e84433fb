package s3store

import (
	"context"
	"errors"
	"net/http"

	"github.com/minio/minio-go/v7"

	"github.com/gantry-build/gantry/internal/blobstore"
)

// isNotFound reports whether err is the store's "no such object".
func isNotFound(err error) bool {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	return resp.Code == "NoSuchKey" || resp.Code == "NotFound" || resp.StatusCode == http.StatusNotFound
}

// fail turns a request's error into what the stores return: ErrNotFound
// stays (the caller maps it), a cancelled or expired context stays, and
// anything else is a *blobstore.UnavailableError naming the endpoint and
// the store's own error, so that clients see UNAVAILABLE and retry.
func (b *Bucket) fail(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case isNotFound(err):
		return blobstore.ErrNotFound
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return &blobstore.UnavailableError{Backend: b.where, Op: op, Err: err}
}
