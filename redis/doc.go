// Package redis is the Redis adapter of fencelock (documentation in progress;
// see doc comments of New and Config).
package redis
