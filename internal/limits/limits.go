// Package limits bounds what a gRPC call may ask of the server before it
// reaches a service: the length of the names a request carries (names.go)
// and how many streams one caller keeps open at once (streams.go). Both
// are interceptors, so that every service, present and future, is held to
// the same bounds.
package limits
