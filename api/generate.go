// Package api holds the .proto files of Gantry's own gRPC services and the
// Go code generated from them (committed). Regenerate with `go generate ./api`.
package api

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=paths=source_relative:. --go-grpc_out=paths=source_relative:. worker/v1/worker.proto admin/v1/admin.proto"
