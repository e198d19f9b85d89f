// Package depcheck holds no code: its test checks the module's dependency
// hygiene with the go command. The packages a user imports (backend, its
// adapters, fencing and its guards) must not link the test machinery
// (testing, testify, dockertest, the module's own test servers) nor the
// etcd server, and every Example must be a program a user can copy: one
// that go/doc can make standalone and that imports no internal package.
package depcheck
