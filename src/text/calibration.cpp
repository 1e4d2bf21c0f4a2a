#include "text/calibration.hpp"

namespace ffn::text {

const std::vector<std::string>& calibration_texts() {
  static const std::vector<std::string> texts = {
      "The train to the coast leaves every hour from platform four.",
      "How do I reset my password if I no longer have access to my email?",
      "Photosynthesis converts light energy into chemical energy stored in glucose.",
      "She poured the coffee, sat by the window and watched the rain.",
      "Quarterly revenue rose 12% while operating costs stayed flat.",
      "Can you recommend a good book about the history of mathematics?",
      "The committee postponed its decision until the next meeting.",
      "A small dog barked at the mail carrier.",
      "Preheat the oven to 180 degrees and grease a round cake tin.",
      "Mount Everest is the highest mountain above sea level.",
      "I can't believe the concert was cancelled at the last minute!",
      "Neural networks learn representations from large amounts of data.",
      "The museum is closed on Mondays and public holidays.",
      "He fixed the leaking tap with a wrench and some tape.",
      "What is the difference between weather and climate?",
      "The new bridge reduced the commute by twenty minutes.",
      "Children were playing football in the park after school.",
      "Please send the signed contract back by Friday.",
      "The patient reported mild headaches and trouble sleeping.",
      "Our flight was delayed because of fog at the airport.",
      "Compilers translate source code into machine instructions.",
      "The river flooded the fields after a week of heavy rain.",
      "Is it safe to eat raw cookie dough?",
      "The orchestra played Beethoven's Fifth Symphony to a full hall.",
      "Electric cars are becoming cheaper to buy and to run.",
      "She learned to speak Spanish while living in Madrid for two years.",
      "The recipe calls for two cups of flour, one egg and a pinch of salt.",
      "Thanks!",
      "Good morning",
      "Where is the nearest pharmacy?",
      "The stock market fell sharply after the interest rate announcement, and analysts expect further "
      "volatility as investors weigh the risk of a recession against strong employment figures.",
      "In the early twentieth century, physicists discovered that light behaves both as a wave and as a "
      "particle, a finding that transformed our understanding of matter and energy.",
      "The hikers reached the summit just before sunset, tired but delighted by the view over the valley, "
      "and camped by a small lake on the way down.",
      "Version 2.3 fixes a crash on startup, improves battery life and adds a dark mode.",
      "The meeting is at 3:30 pm in room 204, bring your laptop.",
      "Cats sleep for up to sixteen hours a day.",
      "The judge ruled that the evidence was inadmissible.",
      "Volunteers planted three hundred trees along the highway.",
      "My grandmother grew tomatoes, beans and courgettes in her garden.",
      "What time does the library open on Saturdays?",
  };
  return texts;
}

}  // namespace ffn::text
