package main

import (
	"fmt"
	"os"

	"github.com/gantry-build/gantry/internal/testutil/cproject"
)

func main() {
	p, err := cproject.Generate(os.Args[1], cproject.DefaultOptions)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(p.Sources))
}
