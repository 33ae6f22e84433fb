module github.com/gantry-build/gantry/deploy

go 1.26.8

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/gantry-build/gantry => ../
