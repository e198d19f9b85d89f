-- The tables and sequences of one prefix ({p}). Every statement is
-- idempotent, and each CREATE or ALTER runs only when the catalog lacks
-- its object: CREATE INDEX IF NOT EXISTS and ALTER TABLE ... IF NOT EXISTS
-- lock the table (SHARE, ACCESS EXCLUSIVE) before they look, and such a
-- lock, queued behind a fenced transaction's FOR SHARE of one lock row,
-- would queue every operation on every lock of the prefix behind it. Over
-- a current or compatible schema the migration takes no table lock but
-- COMMENT's SHARE UPDATE EXCLUSIVE, which no lock operation conflicts with.

-- The FIFO order of waiters: nextval when a waiter joins a queue. (Schema
-- version 1 also made a sequence {p}_token for the fencing tokens; since
-- version 2 a token is the lock row's last one + 1 or the server's clock,
-- and a database migrated from version 1 keeps that sequence unused.)
DO $$
BEGIN
  IF to_regclass('{p}_queue') IS NULL THEN
    CREATE SEQUENCE IF NOT EXISTS {p}_queue;
  END IF;
END $$;

-- One row per lock name that was ever taken. Every change to a lock first
-- locks its row here, so all of them are serialized by that row lock; a
-- fencing check (sqlfence) reads it FOR SHARE in the writer's transaction.
-- owner is NULL while the lock is free; expires is server time
-- (clock_timestamp()), never a client's.
DO $$
BEGIN
  IF to_regclass('{p}_locks') IS NULL THEN
    CREATE TABLE IF NOT EXISTS {p}_locks (
      name     text PRIMARY KEY,
      owner    text,
      token    bigint,
      expires  timestamptz,
      granted  timestamptz,
      holder   text,
      metadata jsonb
    );
  END IF;
END $$;

-- queued is false only when the lock has no live queue row: a waiter's
-- insert sets it (under the row lock), and only a grant or release that
-- found no live waiter, holding the row lock, clears it. It lets the
-- acquire and release of a lock nobody waits for be one UPDATE of this
-- row, without looking at the queue. Rows start true (unknown) until a
-- grant or release finds the queue empty.
--
-- served is the queue position (seq) of the last waiter granted from the
-- queue: that grant deleted every queue row up to it (the lapsed ones it
-- passed), and later rows get larger seqs, so the head is looked for
-- above it. Without it, each look at the head would step over the index
-- entries of every row deleted since the last vacuum.
--
-- ALTER TABLE locks the table against every lock operation even when the
-- column exists (IF NOT EXISTS is checked under that lock), so it runs
-- only for a missing column.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
      WHERE attrelid = '{p}_locks'::regclass AND attname = 'queued' AND NOT attisdropped) THEN
    ALTER TABLE {p}_locks ADD COLUMN IF NOT EXISTS queued boolean NOT NULL DEFAULT true;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
      WHERE attrelid = '{p}_locks'::regclass AND attname = 'served' AND NOT attisdropped) THEN
    ALTER TABLE {p}_locks ADD COLUMN IF NOT EXISTS served bigint NOT NULL DEFAULT 0;
  END IF;
END $$;

-- The acquisitions waiting for a lock, granted in seq order. A row lapses
-- at expires unless its waiter renews it; a promotion hands the lock over
-- with the row's expires (the waiter's own lease clock).
DO $$
BEGIN
  IF to_regclass('{p}_waiters') IS NULL THEN
    CREATE TABLE IF NOT EXISTS {p}_waiters (
      name     text NOT NULL,
      owner    text NOT NULL,
      seq      bigint NOT NULL DEFAULT nextval('{p}_queue'),
      expires  timestamptz NOT NULL,
      since    timestamptz NOT NULL,
      holder   text,
      metadata jsonb,
      PRIMARY KEY (name, owner)
    );
  END IF;
  IF to_regclass('{p}_waiters_order') IS NULL THEN
    CREATE INDEX IF NOT EXISTS {p}_waiters_order ON {p}_waiters (name, seq);
  END IF;
END $$;
