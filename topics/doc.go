// Package topics names a pipeline's topics and makes sure they exist with
// settings that cannot lose a record.
//
// A pipeline has a main topic, one retry topic per tier
// (`<topic>.retry.<name>`, the delay as the configuration wrote it, see
// [FormerTierNames] for tiers named before that), a dead-letter
// topic (`<topic>.dlq` unless configured) and, optionally, a results topic
// and a callbacks topic (`<topic>.callbacks` unless configured) for its
// callback intake. Beside them, one control topic serves every pipeline
// of a cluster ([ForControl]).
// [ForPipeline] turns a [PipelineSpec] into [Spec]s; [Ensure]
// creates the missing ones and then checks everything; [Check] only looks.
// Both return a [Report] that says, per topic, what the broker has and, for
// each problem, the command that fixes it.
//
// What is checked, and why:
//
//   - A tier or DLQ with fewer partitions than its main topic: the processor
//     spreads retries over as many partitions as the main topic has, and a
//     narrower tier becomes the bottleneck of every retry.
//   - A tier or DLQ whose cleanup.policy is not exactly delete: compaction
//     keeps only the newest record per key, so two requests with the same key
//     waiting in a tier (or dead-lettered) would silently become one.
//   - A tier whose retention.ms is shorter than its delay: records would be
//     deleted before they are due. Tiers are created with
//     max(7 days, 4 × delay) so that a processor that is down for a while
//     still finds them.
//   - A DLQ whose retention.ms is shorter than configured: dead letters are
//     the evidence of what failed, and must stay as long as promised.
//   - A callbacks topic that compacts (it would keep the last callback of
//     every job id for ever) or keeps records for less than the callback
//     wait and its margin (a processor starting up would miss callbacks
//     and poll instead).
//   - A control topic ([ForControl]) that deletes, or does not compact:
//     its records are the pipelines' state, and retention would end an
//     operator's pause by itself.
//
// A pipeline that reads its main topic in a share group
// ([PipelineSpec].Share) has that group checked too: the brokers serve
// share groups ([CheckShareGroups]), and the group has [ShareGroupConfigs]
// (a new group would otherwise skip what was written before its first
// member). [EnsureShare] sets those configs and seeds a new group's start
// offsets from the consumer group's commits ([SeedShareGroup]), so that
// switching a pipeline to share mode neither reads its topic again nor
// skips anything; [CheckShare] only looks.
//
// This package creates topics and reads them; it must never delete a topic
// or alter an existing one — no config changed, not even on a topic it
// created itself: an existing topic may hold records nobody has processed
// yet, and it may be another team's. It reports what to fix, with the
// command, and leaves the fixing to an operator. The one exception is
// [Grow], only when asked (`redrive topics ensure --grow`): it adds
// partitions to a tier or DLQ narrower than its main topic (the main topic
// grew), which loses nothing; it never removes partitions, and never
// touches a main, results or callbacks topic. A share group's start
// offsets are set only while it has none.
package topics
