//! Round trips of the graph format, its version and its checks of bad graphs.

use super::*;

fn task(table: &str, operator: Operator) -> TableTask {
    TableTask {
        table: table.into(),
        mask: MaskSource::All,
        selector: Selector::default(),
        transformer: Program {
            ops: vec![Op::Load { column: 0 }],
        },
        flags: Vec::new(),
        joins: Vec::new(),
        filter: None,
        operator,
        keep: Vec::new(),
        output: Output {
            fields: vec![("x".into(), "Int64".into())],
        },
        order: None,
        count_groups: None,
        whole_groups: false,
        having: Vec::new(),
    }
}

/// orders kept by key, lineitem joined with it and aggregated: valid; then each join
/// reference broken in turn is refused with a message naming it.
#[test]
fn join_references_are_checked() {
    let mut build = task("orders", Operator::Nop);
    build.keep = vec![Source::Column(0), Source::Column(4)];
    let mut probe = task(
        "lineitem",
        Operator::Aggregate {
            aggs: vec![Agg {
                func: AggFunc::Sum,
                arg: Some(1),
                scale: 0,
            }],
        },
    );
    probe.joins = vec![Join {
        build: 0,
        probe_keys: vec![Source::Column(0)],
        build_keys: vec![0],
        kind: JoinKind::Inner,
        method: JoinMethod::Auto,
        residual: None,
        condition: None,
    }];
    probe.transformer.ops.push(Op::Fetch { join: 0, column: 1 });
    let good = TaskGraph {
        version: GRAPH_VERSION,
        tasks: vec![build, probe],
    };
    good.check().unwrap();
    let refused = |f: &dyn Fn(&mut TaskGraph), want: &str| {
        let mut g = good.clone();
        f(&mut g);
        let e = g.check().unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
    };
    refused(&|g| g.tasks[1].joins[0].build = 1, "does not run before it");
    // Groups sent whole: the last task's, and only groups that are the SQL's (a build row's
    // column groups finer).
    let by_build_row = |g: &mut TaskGraph| {
        g.tasks[1].operator = Operator::AggregateGroupBy {
            keys: vec![GroupKey::Build { join: 0, column: 1 }],
            aggs: vec![Agg {
                func: AggFunc::Sum,
                arg: Some(1),
                scale: 0,
            }],
        };
    };
    let mut by_value = good.clone();
    by_value.tasks[1].operator = Operator::AggregateGroupBy {
        keys: vec![GroupKey::Register(1)],
        aggs: vec![Agg {
            func: AggFunc::CountAll,
            arg: None,
            scale: 0,
        }],
    };
    by_value.tasks[1].whole_groups = true;
    by_value.check().unwrap();
    refused(
        &|g| {
            by_build_row(g);
            g.tasks[1].whole_groups = true;
        },
        "sends its groups whole",
    );
    refused(
        &|g| g.tasks[1].whole_groups = true,
        "sends its groups whole",
    );
    refused(
        &|g| g.tasks[0].whole_groups = true,
        "sends its groups whole",
    );
    refused(
        &|g| {
            g.tasks[0].operator = Operator::Aggregate {
                aggs: vec![Agg {
                    func: AggFunc::CountAll,
                    arg: None,
                    scale: 0,
                }],
            }
        },
        "build task 0 is neither NOP",
    );
    // A build that aggregates by group: its groups (keys, then values) are its rows.
    let grouped = |g: &mut TaskGraph| {
        g.tasks[0].operator = Operator::AggregateGroupBy {
            keys: vec![GroupKey::Register(0)],
            aggs: vec![Agg {
                func: AggFunc::Min,
                arg: Some(0),
                scale: 0,
            }],
        };
        g.tasks[0].keep.clear();
        g.tasks[0].output.fields = vec![("k".into(), "Int64".into()), ("m".into(), "Int64".into())];
    };
    let mut aggregated = good.clone();
    grouped(&mut aggregated);
    aggregated.check().unwrap();
    refused(
        &|g| {
            grouped(g);
            g.tasks[1].joins[0].build_keys = vec![2];
        },
        "build key 2 beyond the 2 columns",
    );
    refused(
        &|g| {
            grouped(g);
            g.tasks[0].keep = vec![Source::Column(0)];
        },
        "build task 0 is neither NOP",
    );
    // The last task may be NOP: its kept rows go to the host, sorted and cut.
    let mut rows = good.clone();
    rows.tasks[1].operator = Operator::Nop;
    rows.tasks[1].keep = vec![Source::Column(1), Source::Build { join: 0, column: 1 }];
    rows.tasks[1]
        .output
        .fields
        .push(("y".into(), "Int64".into()));
    rows.tasks[1].order = Some(Order {
        keys: vec![SortKey {
            column: 1,
            descending: true,
            nulls_first: false,
        }],
        limit: Some(10),
    });
    rows.check().unwrap();
    rows.tasks[1].output.fields.pop();
    let e = rows.check().unwrap_err().to_string();
    assert!(
        e.contains("sends the 2 columns it keeps, but declares 1"),
        "{e}"
    );
    refused(
        &|g| g.tasks[1].joins[0].build_keys = vec![5],
        "build key 5 beyond",
    );
    refused(
        &|g| g.tasks[1].joins[0].build_keys = vec![0, 1],
        "1 probe keys and 2 build keys",
    );
    refused(
        &|g| g.tasks[1].joins[0].probe_keys = vec![Source::Build { join: 0, column: 0 }],
        "not before it",
    );
    refused(
        &|g| g.tasks[1].transformer.ops[1] = Op::Fetch { join: 0, column: 7 },
        "fetches column 7 of join 0",
    );
    refused(
        &|g| g.tasks[1].joins[0].kind = JoinKind::Semi,
        "not an inner join",
    );
    refused(
        &|g| g.tasks[1].transformer.ops[1] = Op::Flag { flag: 0 },
        "reads flag 0",
    );
    refused(&|g| g.tasks[1].filter = Some(9), "filters on register 9");
    refused(&|g| g.tasks[0].keep.clear(), "keeps no column");
    refused(&|g| g.tasks.truncate(1), "the last task is NOP");
    let residual = |probe: Source, build: usize| {
        move |g: &mut TaskGraph| {
            let join = &mut g.tasks[1].joins[0];
            join.kind = JoinKind::Anti;
            join.residual = Some(Residual { probe, build });
            g.tasks[1].transformer.ops[1] = Op::Load { column: 3 };
        }
    };
    let mut semi = good.clone();
    residual(Source::Column(3), 1)(&mut semi);
    semi.check().unwrap();
    refused(
        &|g| {
            residual(Source::Column(3), 1)(g);
            g.tasks[1].joins[0].kind = JoinKind::Inner;
        },
        "a residual condition on an inner join",
    );
    refused(&residual(Source::Column(3), 0), "residual build column 0");
    refused(&residual(Source::Column(3), 2), "residual build column 2");
    refused(&residual(Source::Flag(0), 1), "reads Flag(0)");
}
