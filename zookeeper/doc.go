// Package zookeeper is the ZooKeeper adapter of fencelock.
package zookeeper
