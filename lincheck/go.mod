module github.com/shmarena/shmarena/lincheck

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/shmarena/shmarena v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/shmarena/shmarena => ../
