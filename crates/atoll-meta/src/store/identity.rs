use super::Store;
use crate::error::Result;

impl Store {
    /// The store's id: made by the first process that asks, the same for every process
    /// on this store afterwards. Data nodes are stamped with it and refuse orders that
    /// carry another (`atoll_data::identity`).
    pub async fn store_id(&self) -> Result<String> {
        self.write("store_id", move |c| {
            // Two replicas starting together both try; the row of the first one stays.
            c.execute(
                "INSERT INTO store_identity (singleton, id, created_at) VALUES (1, $1, $2)
                 ON CONFLICT (singleton) DO NOTHING",
                &[super::new_uuid().into(), crate::now_millis().into()],
            )?;
            let row = c.query_opt("SELECT id FROM store_identity WHERE singleton = 1", &[])?;
            Ok(row.map(|r| r.text(0)).unwrap_or_default())
        })
        .await
    }
}
