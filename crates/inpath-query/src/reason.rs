//! Why a part of a plan stays on the host: [`HostReason`], one variant a reason, carrying the
//! values involved (a column, a type, an expression, a count).
//!
//! `inpath query explain --offload` prints a reason as its [`Display`](std::fmt::Display)
//! text; `--json` gives it as an object whose `kind` names the variant (snake case) beside its
//! values, and its `text`. New reasons are added as the device learns and unlearns shapes, so
//! the enum is `#[non_exhaustive]`: match with a wildcard arm.
//!
//! ```
//! use inpath_query::HostReason;
//! let r = HostReason::JoinKeyCount { keys: 3 };
//! assert_eq!(r.to_string(), "a join on 3 keys");
//! assert_eq!(r.kind(), "join_key_count");
//! let json = r.to_json();
//! assert_eq!(json["kind"], "join_key_count");
//! assert_eq!(json["keys"], 3);
//! ```

use serde::Serialize;

/// Why the device does not run a part of a plan (the host runs it instead).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HostReason {
    // --- The plan's shape ---
    /// A hash repartition sits between the aggregate and its input.
    #[error("a hash repartition below the aggregate")]
    HashRepartitionBelowAggregate,
    /// The input holds an operator the device does not run.
    #[error("its input holds {operator}, which the device does not run yet")]
    UnsupportedOperator {
        /// The operator's name (`SortExec`, `UnionExec`...).
        operator: String,
    },
    /// A projection between joins computes a column.
    #[error("a computed column ({expr}) between joins")]
    ComputedColumnBetweenJoins {
        /// The expression.
        expr: String,
    },
    /// The scan carries a limit.
    #[error("the scan has a limit")]
    ScanLimit,
    /// The filter pushed into a scan is not a Row Selector.
    #[error("the filter on {table} is not a sum of products: {why}")]
    FilterNotSelector {
        /// The table.
        table: String,
        /// Why the filter is not a selector.
        why: Box<HostReason>,
    },
    /// An output column's type has no name in the graph format.
    #[error("output column {column} has a type the graph cannot name")]
    OutputType {
        /// The column.
        column: String,
    },
    /// GROUPING SETS, CUBE or ROLLUP.
    #[error("grouping sets")]
    GroupingSets,
    /// An aggregate with a FILTER clause.
    #[error("an aggregate with a FILTER clause")]
    AggregateFilter,
    /// DISTINCT or ORDER BY inside an aggregate.
    #[error("{aggregate}: DISTINCT or ORDER BY inside an aggregate")]
    DistinctOrOrderedAggregate {
        /// The aggregate.
        aggregate: String,
    },
    /// The task exceeds limits the session enforces (`--fidelity thesis`).
    #[error("over the thesis's limits{}", limits_list(.limits))]
    OverLimits {
        /// The limits exceeded (empty when not named).
        limits: Vec<String>,
    },
    /// Rows sent for a join above carry groups or a filter on the rows sent.
    #[error("groups, or a filter on the rows sent")]
    RowsWithGroupsOrFilter,
    /// The plan is not what the rule built it from (a rule bug, reported rather than run).
    #[error("{detail}")]
    Inconsistent {
        /// What did not match.
        detail: String,
    },

    // --- An aggregate's groups joined on the device ---
    /// The aggregate above the device is not the Final half of a group-by.
    #[error("an aggregate's groups joined: not the Final aggregate of a group-by")]
    GroupsNotFinal,
    /// The Partial aggregate below is not on the device.
    #[error("an aggregate's groups joined: its Partial aggregate is not on the device")]
    GroupsPartialOnHost,
    /// The device node has no Partial aggregate to fall back to.
    #[error("an aggregate's groups joined: no Partial aggregate under the device")]
    GroupsNoPartial,
    /// The device's graph has no task.
    #[error("an aggregate's groups joined: an empty graph")]
    GroupsEmptyGraph,
    /// The device's task is not a plain group-by (ordered, counted or another operator).
    #[error("an aggregate's groups joined: the device's task is not a plain group-by")]
    GroupsNotPlain,
    /// A group key is computed, not a column.
    #[error("an aggregate's groups joined: group key {key} is not a column")]
    GroupKeyNotColumn {
        /// The key.
        key: String,
    },
    /// An aggregate of the groups is not the min or max of a column.
    #[error("an aggregate's groups joined: {aggregate} is not the min or max of a column")]
    GroupValueNotMinMax {
        /// The aggregate.
        aggregate: String,
    },
    /// The aggregate's output is not its keys and one value per aggregate.
    #[error(
        "an aggregate's groups joined: its output is not its keys and one value per aggregate"
    )]
    GroupsOutputShape,
    /// An aggregate's groups stream on a join's probe side.
    #[error(
        "an aggregate's groups on a join's streaming side (the device holds groups as a build \
         only)"
    )]
    GroupsStreamed,
    /// The aggregate's input is another aggregate's groups.
    #[error(
        "its input is an aggregate's groups (the device joins them, but does not aggregate \
         them again)"
    )]
    AggregatedGroups,

    // --- Joins ---
    /// A join key column may hold nulls.
    #[error("join key {column} may hold nulls")]
    NullableJoinKey {
        /// The column.
        column: String,
    },
    /// A join key of a type the device does not join on.
    #[error("join key {column} is {data_type}")]
    JoinKeyType {
        /// The column.
        column: String,
        /// Its stored type.
        data_type: String,
    },
    /// Two join keys at different decimal scales.
    #[error("join keys {probe} and {build} at scales {probe_scale} and {build_scale}")]
    JoinKeyScales {
        /// The probe side's key.
        probe: String,
        /// The build side's key.
        build: String,
        /// The probe key's scale.
        probe_scale: i8,
        /// The build key's scale.
        build_scale: i8,
    },
    /// A null-aware anti join (NOT IN).
    #[error("a null-aware anti join (NOT IN)")]
    NullAwareAntiJoin,
    /// A join type the device does not run.
    #[error("a {join_type} join")]
    JoinType {
        /// The type (`Left`, `Full`...).
        join_type: String,
    },
    /// A left join under an aggregate that is not counts of the right side's rows grouped
    /// by the left side's unique join key.
    #[error(
        "a Left join under an aggregate: {detail} (the device runs counts of the right side's \
         rows grouped by the left table's unique join key)"
    )]
    LeftJoinCounts {
        /// What does not fit.
        detail: String,
    },
    /// A join on no keys or on more than two.
    #[error("a join on {keys} keys")]
    JoinKeyCount {
        /// The number of keys.
        keys: usize,
    },
    /// A join key that is an expression.
    #[error("a join key that is an expression ({expr})")]
    JoinKeyExpression {
        /// The expression.
        expr: String,
    },
    /// A filter inside a join's build side.
    #[error("a filter inside a join's build side")]
    BuildSideFilter,
    /// A residual join condition other than `probe <> build` on integer columns.
    #[error(
        "a {join_type} join with a residual filter other than `a <> b` on integer columns ({filter}){}",
        keys_suffix(.keys)
    )]
    ResidualFilter {
        /// The join's type.
        join_type: String,
        /// The residual filter.
        filter: String,
        /// Why its columns cannot be compared, when they are columns.
        keys: Option<Box<HostReason>>,
    },
    /// A residual condition on an aggregate's groups.
    #[error("a residual condition on an aggregate's groups")]
    ResidualOnGroups,
    /// A filter on an aggregate's groups that is not a HAVING the device tests: every term
    /// a sum, count, minimum or maximum compared with a constant at its scale.
    #[error(
        "a filter on an aggregate's groups ({filter}) is not its sums, counts, minima or \
         maxima compared with constants"
    )]
    HavingNotTest {
        /// The filter.
        filter: String,
    },

    // --- Expressions (the transformer's compiler) ---
    /// A group key the compiler refused, and why.
    #[error("group key {key}: {why}")]
    InGroupKey {
        /// The key.
        key: String,
        /// Why.
        why: Box<HostReason>,
    },
    /// An aggregate the compiler refused, and why.
    #[error("{aggregate}: {why}")]
    InAggregate {
        /// The aggregate.
        aggregate: String,
        /// Why.
        why: Box<HostReason>,
    },
    /// A filter the compiler refused, and why.
    #[error("the filter {filter}: {why}")]
    InFilter {
        /// The filter.
        filter: String,
        /// Why.
        why: Box<HostReason>,
    },
    /// DataFusion could not type an expression.
    #[error("{detail}")]
    Planning {
        /// DataFusion's error.
        detail: String,
    },
    /// A column of a type the transformer does not compute on.
    #[error("column {column} is {data_type}")]
    ColumnType {
        /// The column.
        column: String,
        /// Its stored type.
        data_type: String,
    },
    /// A column that may hold nulls.
    #[error("column {column} may hold nulls")]
    NullableColumn {
        /// The column.
        column: String,
    },
    /// A string prefix of more characters than a register packs.
    #[error("a prefix of {chars} characters (1 to 7 pack into a register)")]
    PrefixLength {
        /// The characters asked for.
        chars: i64,
    },
    /// A comparison with a value known only when the query runs, by an operator other than
    /// `<`, `<=`, `>`, `>=`, or of a type other than an integer or decimal.
    #[error(
        "a comparison by {op} with a subquery's value of type {data_type} (the device binds <, \
         <=, > and >= with integers and decimals)"
    )]
    SubqueryComparison {
        /// The condition.
        condition: String,
        /// The operator.
        op: String,
        /// The value's type.
        data_type: String,
    },
    /// A plan built on a device plan whose comparator is bound when the query runs.
    #[error("the device's rows compare with a subquery's value, bound when the query runs")]
    BoundAtStart,
    /// An expression of a type the transformer does not compute.
    #[error("{expr} is {data_type}")]
    ExpressionType {
        /// The expression.
        expr: String,
        /// Its type.
        data_type: String,
    },
    /// A decimal narrowed to a smaller scale (rounding).
    #[error("a decimal scale {from} narrowed to {to} (rounding)")]
    DecimalNarrowed {
        /// The scale before.
        from: i8,
        /// The scale asked for.
        to: i8,
    },
    /// A literal that is not an exact number.
    #[error("the literal {value}")]
    Literal {
        /// The literal.
        value: String,
    },
    /// A literal beyond 64 bits at its scale.
    #[error("the literal {value} beyond 64 bits")]
    LiteralBeyond64Bits {
        /// The scaled literal.
        value: String,
    },
    /// `CASE x WHEN ...` (with an operand).
    #[error("CASE with an operand")]
    CaseWithOperand,
    /// CASE without ELSE, whose result may be NULL.
    #[error("CASE without ELSE (a NULL result)")]
    CaseWithoutElse,
    /// An arithmetic or comparison operator the device does not run.
    #[error("the operator {op}")]
    Operator {
        /// The operator.
        op: String,
    },
    /// DataFusion's result scale differs from the exact one.
    #[error("{expr}: DataFusion's result scale {planned} is not the exact scale {exact}")]
    InexactScale {
        /// The expression.
        expr: String,
        /// The scale DataFusion planned.
        planned: i8,
        /// The exact scale.
        exact: i8,
    },
    /// An expression the compiler does not know.
    #[error("the expression {expr}")]
    Expression {
        /// The expression.
        expr: String,
    },
    /// A string test that resolved to a column instead of a flag.
    #[error("a flag that is a column")]
    FlagIsColumn,
    /// A CASE condition that is not a comparison.
    #[error("the condition {condition}")]
    Condition {
        /// The condition.
        condition: String,
    },
    /// A CASE condition's operator.
    #[error("the condition operator {op}")]
    ConditionOperator {
        /// The operator.
        op: String,
    },
    /// A CASE condition not against a constant.
    #[error("the condition {condition}: not against a constant")]
    ConditionNotConstant {
        /// The condition.
        condition: String,
    },
    /// A CASE condition's constant that is not an exact number.
    #[error("the condition constant {value}")]
    ConditionConstant {
        /// The constant.
        value: String,
    },
    /// A CASE condition's constant beyond 64 bits at its scale.
    #[error("the condition constant {value} beyond 64 bits")]
    ConditionConstantBeyond64Bits {
        /// The scaled constant.
        value: String,
    },
    /// A group key on a dictionary column that may hold nulls.
    #[error("a nullable dictionary column")]
    NullableDictionary,
    /// An aggregate function the device does not run.
    #[error("the aggregate function {function}")]
    AggregateFunction {
        /// The function.
        function: String,
    },
    /// An aggregate of other than one argument.
    #[error("{arguments} arguments")]
    AggregateArguments {
        /// The number of arguments.
        arguments: usize,
    },
    /// `count(NULL)`.
    #[error("count of NULL")]
    CountOfNull,
    /// A string test on a flag.
    #[error("a test on a flag")]
    TestOnFlag,

    // --- Filters as Row Selectors ---
    /// An OR of ANDs that multiplies out to over 256 products.
    #[error("an OR of ANDs of over 256 sums of comparators ({left} x {right})")]
    TooManyProducts {
        /// Products on the left.
        left: usize,
        /// Products on the right.
        right: usize,
    },
    /// An IN list item that is not a string.
    #[error("IN item {item}")]
    InItem {
        /// The item.
        item: String,
    },
    /// A comparison whose operands cannot be swapped.
    #[error("{expr}")]
    NotSwappable {
        /// The comparison.
        expr: String,
    },
    /// A LIKE pattern that is not a string literal.
    #[error("a LIKE pattern that is not a string")]
    LikePattern,
    /// Inside an OR, a test that is not a comparator.
    #[error("{expr} inside an OR")]
    InsideOr {
        /// The test.
        expr: String,
    },
    /// A filter expression that is not a comparison, BETWEEN, IN, LIKE, AND or OR.
    #[error("{expr}")]
    FilterExpression {
        /// The expression.
        expr: String,
    },
    /// A prefix compared with a value that is not a string.
    #[error("a prefix compared with {value}")]
    PrefixValue {
        /// The value.
        value: String,
    },
    /// A prefix compared with a string of another length or with wildcards.
    #[error(
        "a prefix of {length} characters compared with {text:?} (not {length} plain characters)"
    )]
    PrefixText {
        /// The prefix's length.
        length: i64,
        /// The string.
        text: String,
    },
    /// A column the table does not have.
    #[error("no column {column}")]
    NoColumn {
        /// The column.
        column: String,
    },
    /// A cast that changes the column's values (narrows or reorders them).
    #[error("{expr} changes the column's values")]
    ChangingCast {
        /// The cast.
        expr: String,
    },
    /// An operand that is not a plain column.
    #[error("{expr} is not a plain column")]
    NotAColumn {
        /// The operand.
        expr: String,
    },
    /// Two columns of different types compared.
    #[error("{column} against {other}, a column of another type")]
    ColumnsOfOtherTypes {
        /// The column.
        column: String,
        /// The other column.
        other: String,
    },
    /// A string column compared with something that is not a string.
    #[error("{value} against a string")]
    NotAString {
        /// The value.
        value: String,
    },
    /// `<`, `<=`, `>` or `>=` on strings.
    #[error("an ordering comparison of strings")]
    StringOrdering,
    /// A comparison on a column type the selector does not compare.
    #[error("a comparison on a {data_type} column")]
    ComparisonType {
        /// The column's stored type.
        data_type: String,
    },
    /// A comparison with something that is not a constant.
    #[error("{value} is not a constant")]
    NotAConstant {
        /// The operand.
        value: String,
    },
    /// A constant the column's type cannot hold exactly.
    #[error("the constant {value} against a {data_type} column")]
    ConstantType {
        /// The constant.
        value: String,
        /// The column's stored type.
        data_type: String,
    },
}

fn limits_list(limits: &[String]) -> String {
    if limits.is_empty() {
        String::new()
    } else {
        format!(": {}", limits.join(", "))
    }
}

fn keys_suffix(keys: &Option<Box<HostReason>>) -> String {
    keys.as_ref().map(|k| format!(": {k}")).unwrap_or_default()
}

impl HostReason {
    /// The variant's name in snake case: the `kind` of its JSON form.
    pub fn kind(&self) -> String {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => map
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or_default()
                .to_string(),
            _ => String::new(),
        }
    }

    /// The reason as JSON: `kind`, the variant's values, and `text` (its display).
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(map) = &mut value {
            map.insert("text".into(), self.to_string().into());
        }
        value
    }

    /// An inconsistency of the plan (`detail` names it).
    pub(crate) fn inconsistent(detail: &str) -> HostReason {
        HostReason::Inconsistent {
            detail: detail.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts are the ones `explain --offload` printed before the reasons were typed, and
    /// the JSON form carries the kind, the values (nested reasons as objects) and the text.
    #[test]
    fn texts_and_json_carry_the_values() {
        let keys = HostReason::JoinKeyScales {
            probe: "l_a".into(),
            build: "o_b".into(),
            probe_scale: 2,
            build_scale: 0,
        };
        assert_eq!(keys.to_string(), "join keys l_a and o_b at scales 2 and 0");
        let residual = HostReason::ResidualFilter {
            join_type: "LeftSemi".into(),
            filter: "a@0 < b@1".into(),
            keys: Some(Box::new(keys.clone())),
        };
        assert_eq!(
            residual.to_string(),
            "a LeftSemi join with a residual filter other than `a <> b` on integer columns \
             (a@0 < b@1): join keys l_a and o_b at scales 2 and 0"
        );
        let json = residual.to_json();
        assert_eq!(json["kind"], "residual_filter");
        assert_eq!(json["join_type"], "LeftSemi");
        assert_eq!(json["keys"]["kind"], "join_key_scales");
        assert_eq!(json["keys"]["probe_scale"], 2);
        assert_eq!(json["text"], residual.to_string());
        assert_eq!(
            HostReason::OverLimits { limits: vec![] }.to_string(),
            "over the thesis's limits"
        );
        let over = HostReason::OverLimits {
            limits: vec!["comparators 6 > 4".into(), "read ports 2 > 1".into()],
        };
        assert_eq!(
            over.to_string(),
            "over the thesis's limits: comparators 6 > 4, read ports 2 > 1"
        );
        assert_eq!(over.kind(), "over_limits");
        let filter = HostReason::FilterNotSelector {
            table: "lineitem".into(),
            why: Box::new(HostReason::StringOrdering),
        };
        assert_eq!(
            filter.to_string(),
            "the filter on lineitem is not a sum of products: an ordering comparison of strings"
        );
        assert_eq!(filter.to_json()["why"]["kind"], "string_ordering");
    }
}
