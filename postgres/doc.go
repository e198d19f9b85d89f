// Package postgres is fencelock's PostgreSQL adapter: fenced locks in a
// lease table, with tokens from a sequence. See Schema for the tables and
// functions it uses; the full documentation follows with the adapter.
package postgres
