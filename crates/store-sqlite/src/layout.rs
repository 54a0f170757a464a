//! What the database holds and how: the tables, their versions and upgrades, reading them
//! all at open, and writing one batch.
//!
//! Only current rows are kept (`kv`). The store revision is the newest row's, or the one in
//! `meta` when a delete took it off the rows (see [`write()`]). A row is keyed by its
//! create revision, which no two live keys share and which a key keeps for its life: new
//! objects then append to the table's last leaf, and no index is needed, since the
//! in-memory index answers every lookup by key. Values are LZ4-compressed (a KubeVirt
//! object shrinks about 3x), so a page holds several objects and a commit writes fewer;
//! they are the in-memory index's packed values (`store::Packed`) byte for byte, and the
//! dictionaries they are packed against are kept in `dict`.

use bytes::Bytes;
use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use store::expiry::Expiring;
use store::{Dictionaries, Dictionary, EventKind, Packed, PackedKv, Revision, StagedBatch};

/// Stored in `PRAGMA user_version`, so a newer layout is refused rather than misread.
/// Version 1 kept `kv` WITHOUT ROWID, keyed by the key, with values as they are: objects
/// spilled into overflow pages and interior pages held whole keys, so an insert rewrote
/// about five pages. Version 2 had no `dict`: every value was packed on its own. Version 3
/// had no `expiry`.
pub const SCHEMA_VERSION: i64 = 4;

const KV_TABLE: &str = "
    CREATE TABLE kv (
        create_rev INTEGER PRIMARY KEY,
        key TEXT NOT NULL,
        value BLOB NOT NULL,
        mod_rev INTEGER NOT NULL
    );";
const META_TABLE: &str = "
    CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO meta (name, value) VALUES ('revision', 0);";
const DICT_TABLE: &str = "
    CREATE TABLE dict (id INTEGER PRIMARY KEY, class TEXT NOT NULL, bytes BLOB NOT NULL);";
/// Expiring writes (see `store::expiry`): a row per write, by its revision, until the
/// writer has deleted the key or found it written again.
const EXPIRY_TABLE: &str = "
    CREATE TABLE expiry (revision INTEGER PRIMARY KEY, key TEXT NOT NULL, at INTEGER NOT NULL);";
const INSERT_EXPIRY: &str = "INSERT OR REPLACE INTO expiry (revision, key, at) VALUES (?1, ?2, ?3)";
const DELETE_EXPIRY: &str = "DELETE FROM expiry WHERE revision = ?1";
const INSERT_DICT: &str = "INSERT INTO dict (id, class, bytes) VALUES (?1, ?2, ?3)";
const INSERT: &str = "INSERT INTO kv (create_rev, key, value, mod_rev) VALUES (?1, ?2, ?3, ?4)";
const UPSERT: &str = "INSERT INTO kv (create_rev, key, value, mod_rev) VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (create_rev) DO UPDATE SET value = excluded.value, mod_rev = excluded.mod_rev";
const DELETE: &str = "DELETE FROM kv WHERE create_rev = ?1";
const SET_REVISION: &str = "UPDATE meta SET value = ?1 WHERE name = 'revision'";

/// What opening a database at some `user_version` must do.
pub enum Upgrade {
    Current,
    Newer,
    Apply(fn(&Transaction) -> rusqlite::Result<()>),
}

pub fn upgrade_from(version: i64) -> Upgrade {
    match version {
        0 => Upgrade::Apply(create),
        1 => Upgrade::Apply(upgrade_from_v1),
        2 => Upgrade::Apply(upgrade_from_v2),
        3 => Upgrade::Apply(upgrade_from_v3),
        SCHEMA_VERSION => Upgrade::Current,
        _ => Upgrade::Newer,
    }
}

/// Runs `step` and records the current version, in one transaction.
pub fn apply(
    conn: &mut Connection,
    step: fn(&Transaction) -> rusqlite::Result<()>,
) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    step(&tx)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()
}

fn create(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(&format!(
        "{KV_TABLE} {META_TABLE} {DICT_TABLE} {EXPIRY_TABLE}"
    ))
}

fn upgrade_from_v3(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(EXPIRY_TABLE)
}

/// Version 2's rows stay as they are (packed without a dictionary, which reads as before).
fn upgrade_from_v2(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(DICT_TABLE)?;
    upgrade_from_v3(tx)
}

/// Version 1's rows, compressed, into the new `kv`; `meta` is unchanged.
fn upgrade_from_v1(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(&format!("ALTER TABLE kv RENAME TO kv_v1; {KV_TABLE}"))?;
    {
        let mut insert = tx.prepare(INSERT)?;
        let mut rows = tx.prepare("SELECT create_rev, key, value, mod_rev FROM kv_v1")?;
        let mut rows = rows.query([])?;
        while let Some(row) = rows.next()? {
            let create_rev: Revision = row.get(0)?;
            let key: String = row.get(1)?;
            let value: Vec<u8> = row.get(2)?;
            let mod_rev: Revision = row.get(3)?;
            insert.execute(params![
                create_rev,
                key,
                Packed::pack(&value).as_bytes(),
                mod_rev
            ])?;
        }
    }
    tx.execute_batch("DROP TABLE kv_v1;")?;
    upgrade_from_v2(tx)
}

fn corrupt(column: usize, message: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(column, Type::Blob, message.into())
}

/// Reads every row, its value left packed, the dictionaries and the current revision.
pub fn load(conn: &Connection) -> rusqlite::Result<(Vec<PackedKv>, Revision, Dictionaries)> {
    let dictionaries = conn
        .prepare("SELECT id, class, bytes FROM dict")?
        .query_map([], |row| {
            Ok(Dictionary {
                id: row.get(0)?,
                class: row.get(1)?,
                bytes: row.get::<_, Vec<u8>>(2)?.into(),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let dictionaries = Dictionaries::new(dictionaries);
    let revision: Revision = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'revision'",
            [],
            |row| row.get(0),
        )
        .optional()?
        .unwrap_or(0);
    let mut stmt = conn.prepare("SELECT key, value, create_rev, mod_rev FROM kv")?;
    let items = stmt
        .query_map([], |row| {
            let value = Bytes::copy_from_slice(row.get_ref(1)?.as_blob()?);
            Ok(PackedKv {
                key: row.get(0)?,
                value: Packed::from_packed(value, &dictionaries).map_err(|e| corrupt(1, e))?,
                create_revision: row.get(2)?,
                mod_revision: row.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    // `write` records the revision only when no row it writes carries it.
    let newest_row = items.iter().map(|kv| kv.mod_revision).max().unwrap_or(0);
    Ok((items, revision.max(newest_row), dictionaries))
}

/// The expiring writes not yet settled.
pub fn load_expiring(conn: &Connection) -> rusqlite::Result<Vec<Expiring>> {
    conn.prepare("SELECT revision, key, at FROM expiry")?
        .query_map([], |row| {
            Ok(Expiring {
                revision: row.get(0)?,
                key: row.get(1)?,
                at: row.get::<_, i64>(2)? as u64,
            })
        })?
        .collect()
}

/// The revision on disk, as `load` computes it, without reading the values.
pub fn revision(conn: &Connection) -> rusqlite::Result<Revision> {
    let recorded: Revision = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'revision'",
            [],
            |row| row.get(0),
        )
        .optional()?
        .unwrap_or(0);
    let newest_row: Option<Revision> =
        conn.query_row("SELECT max(mod_rev) FROM kv", [], |row| row.get(0))?;
    Ok(recorded.max(newest_row.unwrap_or(0)))
}

/// Writes a staged batch into `tx`, and its revision where no row of it carries it, with
/// the batch's new expiring writes and without the ones it settled.
pub fn write(
    tx: &Transaction,
    staged: &StagedBatch,
    expiring: &[Expiring],
    settled: &[Revision],
) -> rusqlite::Result<()> {
    if !expiring.is_empty() || !settled.is_empty() {
        let mut insert = tx.prepare_cached(INSERT_EXPIRY)?;
        for e in expiring {
            insert.execute(params![e.revision, e.key, e.at as i64])?;
        }
        let mut delete = tx.prepare_cached(DELETE_EXPIRY)?;
        for revision in settled {
            delete.execute([revision])?;
        }
    }
    // In the same transaction as the first values that need them.
    for dictionary in staged.new_dictionaries() {
        tx.prepare_cached(INSERT_DICT)?.execute(params![
            dictionary.id,
            dictionary.class,
            &dictionary.bytes[..]
        ])?;
    }
    let mut upsert = tx.prepare_cached(UPSERT)?;
    let mut delete = tx.prepare_cached(DELETE)?;
    for change in staged.changes() {
        let kv = &change.kv;
        match change.kind {
            EventKind::Put => upsert.execute(params![
                kv.create_revision,
                kv.key,
                kv.value.as_bytes(),
                kv.mod_revision
            ])?,
            EventKind::Delete => delete.execute([kv.create_revision])?,
        };
    }
    // A batch that ends with a put leaves its revision on that row, where `load` finds
    // it; rewriting the meta page as well cost a WAL page per commit. A row can lose the
    // newest revision only to a later delete, whose batch then records it here.
    let carried_by_row = staged
        .changes()
        .last()
        .is_some_and(|e| e.kind == EventKind::Put && e.kv.mod_revision == staged.revision());
    if !carried_by_row {
        tx.prepare_cached(SET_REVISION)?
            .execute([staged.revision()])?;
    }
    Ok(())
}
