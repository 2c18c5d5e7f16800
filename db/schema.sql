-- celtune database, schema version 1 (PRAGMA user_version = 1).
-- Devices, problems and configs are interned; measurements hold every timed or
-- failed candidate; best holds one chosen config per (device, problem) with its
-- provenance. Only the tuner (and import/merge) write; the runtime only reads.

CREATE TABLE devices (
  id               INTEGER PRIMARY KEY,
  name             TEXT    NOT NULL,
  arch             TEXT    NOT NULL,      -- sm_90, cpu
  sm_count         INTEGER NOT NULL,
  memory_bytes     INTEGER NOT NULL,
  driver           TEXT    NOT NULL,
  runtime          TEXT    NOT NULL,
  cublaslt         TEXT    NOT NULL,
  cublaslt_version INTEGER NOT NULL,
  UNIQUE (name, arch, sm_count, memory_bytes, driver, runtime, cublaslt)
);

-- The key is the identity (Problem::key()); the columns beside it are the ones
-- nearest-shape lookups filter on.
CREATE TABLE problems (
  id      INTEGER PRIMARY KEY,
  key     TEXT    NOT NULL UNIQUE,
  family  TEXT    NOT NULL,
  tokens  INTEGER NOT NULL,
  hidden  INTEGER NOT NULL,
  vocab   INTEGER NOT NULL,
  dtype   TEXT    NOT NULL,
  mode    TEXT    NOT NULL
);
CREATE INDEX problems_shape ON problems (family, hidden, vocab, dtype, mode);

-- Canonical JSON (sorted keys) of a KernelConfig.
CREATE TABLE configs (
  id   INTEGER PRIMARY KEY,
  json TEXT NOT NULL UNIQUE
);

CREATE TABLE measurements (
  id              INTEGER PRIMARY KEY,
  device_id       INTEGER NOT NULL REFERENCES devices (id),
  problem_id      INTEGER NOT NULL REFERENCES problems (id),
  config_id       INTEGER NOT NULL REFERENCES configs (id),
  kernel_hash     TEXT    NOT NULL,
  status          TEXT    NOT NULL CHECK (status IN ('ok', 'failed')),
  reason          TEXT    NOT NULL DEFAULT '',
  median_ms       REAL,
  p20_ms          REAL,
  p80_ms          REAL,
  samples         INTEGER NOT NULL DEFAULT 0,
  spread          REAL,                      -- (p80 − p20) / median
  clock_start_mhz REAL,
  clock_end_mhz   REAL,
  created_at      TEXT    NOT NULL,
  UNIQUE (device_id, problem_id, config_id, kernel_hash)
);

CREATE TABLE best (
  device_id       INTEGER NOT NULL REFERENCES devices (id),
  problem_id      INTEGER NOT NULL REFERENCES problems (id),
  config_id       INTEGER NOT NULL REFERENCES configs (id),
  median_ms       REAL    NOT NULL,
  p20_ms          REAL    NOT NULL,
  p80_ms          REAL    NOT NULL,
  samples         INTEGER NOT NULL,
  spread          REAL    NOT NULL,
  default_ms      REAL    NOT NULL,          -- the built-in default's time, same problem
  speedup         REAL    NOT NULL,          -- default_ms / median_ms
  celtune_version TEXT    NOT NULL,
  kernel_hash     TEXT    NOT NULL,
  cublaslt        TEXT    NOT NULL,
  created_at      TEXT    NOT NULL,
  PRIMARY KEY (device_id, problem_id)
);
