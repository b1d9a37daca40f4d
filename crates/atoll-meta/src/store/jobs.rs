use super::Store;
use crate::error::Result;
use crate::model::Group;

impl Store {
    /// Takes (or renews) the lease of job `name` for `holder` until `until`, unless another
    /// holder has it and it has not expired. Atomic: of several replicas, one wins.
    pub async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<bool> {
        let (name, holder) = (name.to_string(), holder.to_string());
        self.write("acquire_lease", move |c| {
            let taken = c.execute(
                "INSERT INTO job_leases (name, holder, expires_at) VALUES ($1, $2, $3)
                 ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
                 WHERE job_leases.expires_at <= $4 OR job_leases.holder = excluded.holder",
                &[name.into(), holder.into(), until.into(), now.into()],
            )?;
            Ok(taken == 1)
        })
        .await
    }

    /// Records activity on a group (queries on its databases, changes to it), which keeps
    /// free-plan groups from being archived.
    pub async fn touch_group(&self, group_id: &str, at: i64) -> Result<()> {
        let group_id = group_id.to_string();
        self.write("touch_group", move |c| {
            c.execute(
                "UPDATE org_groups SET last_activity_at = $2 WHERE id = $1 AND last_activity_at < $2",
                &[group_id.into(), at.into()],
            )?;
            Ok(())
        })
        .await
    }

    /// Active groups of organizations on `plan` with no activity since `before`.
    pub async fn idle_groups(&self, plan: &str, before: i64) -> Result<Vec<Group>> {
        let plan = plan.to_string();
        let secrets = self.secrets();
        self.read("idle_groups", move |c| {
            let sql = format!(
                "SELECT {} FROM org_groups g JOIN organizations o ON o.id = g.org_id
                 WHERE g.archived = 0 AND o.plan_id = $1 AND g.last_activity_at < $2 ORDER BY g.id",
                super::groups::GROUP_COLUMNS
            );
            super::groups::groups_from_rows(
                &c.query(&sql, &[plan.into(), before.into()])?,
                &secrets,
            )
        })
        .await
    }
}
